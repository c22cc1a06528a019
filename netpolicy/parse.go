package netpolicy

import (
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"sandfs/ctl/msg"
)

// Bounds on a policy's text (every byte of it may come from a client).
const (
	TextMax   = 64 << 10 // bytes of text
	RulesMax  = 4096     // address rules; the program's tries hold as many each
	DomainMax = 256      // allowed domains
	nameMax   = 253      // bytes of a domain name (RFC 1035 §2.3.4)
	labelMax  = 63       // bytes of one label
)

// Parse reads a policy in the grammar of docs/network.md:
//
//	policy = { line "\n" }          (the last newline may be missing)
//	line   = [ rule ] [ "#" text ]  (blanks: spaces and tabs)
//	rule   = "default" ( "allow" | "deny" )
//	       | ( "allow" | "deny" ) address
//	       | "allow" domain
//	address = IPv4 | IPv6 | IPv4 "/" len | IPv6 "/" len
//	domain  = [ "*." ] label { "." label } [ "." ]
//
// At most one default line (absent: default deny). Prefixes must have no
// host bits set; IPv4-mapped IPv6 addresses and zones are refused.
// Domain names are lower-cased; the last label may not be all digits.
// Errors are *msg.Error: EINVAL for malformed text, E2BIG past a bound,
// with the text `policy: line N: reason "input"`.
func Parse(text []byte) (*Policy, error) {
	if len(text) > TextMax {
		return nil, msg.Errorf(syscall.E2BIG, "policy: %d bytes, at most %d", len(text), TextMax)
	}
	if !utf8.Valid(text) {
		return nil, msg.Errorf(syscall.EINVAL, "policy: not UTF-8")
	}
	p := &Policy{}
	sawDefault := false
	for i, line := range strings.Split(string(text), "\n") {
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(f) == 0 {
			continue
		}
		if err := p.parseRule(f, &sawDefault); err != nil {
			return nil, msg.Errorf(msg.Errno(err), "policy: line %d: %s", i+1, err.Error())
		}
	}
	p.canonical()
	if len(p.Rules) > RulesMax {
		return nil, msg.Errorf(syscall.E2BIG, "policy: %d address rules, at most %d", len(p.Rules), RulesMax)
	}
	if len(p.Domains) > DomainMax {
		return nil, msg.Errorf(syscall.E2BIG, "policy: %d domains, at most %d", len(p.Domains), DomainMax)
	}
	return p, nil
}

// parseRule adds the rule of one line's fields f to p.
func (p *Policy) parseRule(f []string, sawDefault *bool) error {
	if len(f) != 2 {
		return msg.Errorf(syscall.EINVAL, "want 2 words, not %d, in %s", len(f), msg.Cite(strings.Join(f, " ")))
	}
	switch f[0] {
	case "default":
		v, ok := verdict(f[1])
		if !ok {
			return msg.Errorf(syscall.EINVAL, "default: want allow or deny, not %s", msg.Cite(f[1]))
		}
		if *sawDefault {
			return msg.Errorf(syscall.EINVAL, "default: given twice")
		}
		*sawDefault, p.Default = true, v
		return nil
	case "allow", "deny":
		v, _ := verdict(f[0])
		if looksLikeAddress(f[1]) {
			pfx, err := parsePrefix(f[1])
			if err != nil {
				return err
			}
			p.Rules = append(p.Rules, Rule{Verdict: v, Prefix: pfx})
			if len(p.Rules) > 2*RulesMax { // bound the work before dedup
				return msg.Errorf(syscall.E2BIG, "more than %d address rules", RulesMax)
			}
			return nil
		}
		if v != Allow {
			return msg.Errorf(syscall.EINVAL, "deny: domains can only be allowed, not %s", msg.Cite(f[1]))
		}
		d, err := parseDomain(f[1])
		if err != nil {
			return err
		}
		p.Domains = append(p.Domains, d)
		if len(p.Domains) > 2*DomainMax {
			return msg.Errorf(syscall.E2BIG, "more than %d domains", DomainMax)
		}
		return nil
	}
	return msg.Errorf(syscall.EINVAL, "unknown verb %s", msg.Cite(f[0]))
}

func verdict(s string) (Verdict, bool) {
	switch s {
	case "allow":
		return Allow, true
	case "deny":
		return Deny, true
	}
	return Deny, false
}

// looksLikeAddress: IPv6 has a colon; IPv4 is digits, dots and a slash
// (a domain's last label may not be all digits, so none is both).
func looksLikeAddress(s string) bool {
	if strings.ContainsRune(s, ':') {
		return true
	}
	return strings.Trim(s, "0123456789./") == ""
}

// parsePrefix reads an address or prefix of the grammar.
func parsePrefix(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	var err error
	if strings.ContainsRune(s, '%') { // netip.PrefixFrom would drop it
		return pfx, msg.Errorf(syscall.EINVAL, "address with a zone %s", msg.Cite(s))
	}
	if strings.ContainsRune(s, '/') {
		pfx, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil {
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return pfx, msg.Errorf(syscall.EINVAL, "bad address %s", msg.Cite(s))
	}
	a := pfx.Addr()
	switch {
	case a.Is4In6():
		return pfx, msg.Errorf(syscall.EINVAL, "IPv4-mapped address %s: write the IPv4 address", msg.Cite(s))
	case pfx.Masked() != pfx:
		return pfx, msg.Errorf(syscall.EINVAL, "host bits set in %s (the prefix is %s)", msg.Cite(s), pfx.Masked())
	}
	return pfx, nil
}

// parseDomain reads a domain of the grammar.
func parseDomain(s string) (Domain, error) {
	d := Domain{Name: strings.ToLower(s)}
	if rest, ok := strings.CutPrefix(d.Name, "*."); ok {
		d.Name, d.Wildcard = rest, true
	}
	d.Name = strings.TrimSuffix(d.Name, ".")
	bad := func(why string) (Domain, error) {
		return Domain{}, msg.Errorf(syscall.EINVAL, "bad domain %s: %s", msg.Cite(s), why)
	}
	if len(d.Name) == 0 || len(d.Name) > nameMax {
		return bad("length " + strconv.Itoa(len(d.Name)) + ", want 1 to " + strconv.Itoa(nameMax))
	}
	labels := strings.Split(d.Name, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > labelMax {
			return bad("a label of length " + strconv.Itoa(len(l)))
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return bad("a label starts or ends with '-'")
		}
		if strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return bad("only letters, digits, '-' and '_' in labels")
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return bad("the last label is all digits")
	}
	return d, nil
}
