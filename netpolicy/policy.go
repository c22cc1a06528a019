package netpolicy

import (
	"net/netip"
	"slices"
	"strings"
)

// Verdict is what a rule (or the default) says about a destination.
type Verdict uint8

const (
	Deny Verdict = iota
	Allow
)

// String returns "deny" or "allow".
func (v Verdict) String() string {
	if v == Allow {
		return "allow"
	}
	return "deny"
}

// Rule is one address rule: a verdict for a prefix (a single address is
// a /32 or /128). Prefix is masked (Parse refuses host bits).
type Rule struct {
	Verdict Verdict
	Prefix  netip.Prefix
}

// Domain is an allowed name: Name itself, or with Wildcard its proper
// subdomains (*.example.com matches a.example.com and a.b.example.com,
// not example.com). Name is lower case, without a final dot.
type Domain struct {
	Name     string
	Wildcard bool
}

// String returns the domain as the grammar writes it.
func (d Domain) String() string {
	if d.Wildcard {
		return "*." + d.Name
	}
	return d.Name
}

// Policy is a parsed egress policy. Rules and Domains are in canonical
// order (see Parse) with no duplicates, so two policies with the same
// meaning compare equal.
type Policy struct {
	Default Verdict
	Rules   []Rule
	Domains []Domain
}

// Decide returns the verdict for addr: the rule with the longest prefix
// containing addr wins, deny beats allow at equal length, and with no
// rule the default applies. The eBPF program decides the same way; this
// is the reference its tests compare with. Domains are not consulted
// (their addresses become allow rules when the sandbox's resolver
// answers for them: package sbnet).
func (p *Policy) Decide(addr netip.Addr) Verdict {
	addr = addr.Unmap()
	best, v := -1, p.Default
	for _, r := range p.Rules {
		if !r.Prefix.Contains(addr) {
			continue
		}
		b := r.Prefix.Bits()
		if b > best || (b == best && r.Verdict == Deny) {
			best, v = b, r.Verdict
		}
	}
	return v
}

// AllowsName reports whether one of p's domains allows name (case and a
// final dot do not matter): the domain itself, or a proper subdomain of
// a wildcard's.
func (p *Policy) AllowsName(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, d := range p.Domains {
		if name == d.Name && !d.Wildcard || d.Wildcard && strings.HasSuffix(name, "."+d.Name) {
			return true
		}
	}
	return false
}

// String returns the policy in canonical text, which Parse reads back to
// an equal Policy: the default line first, then the rules in canonical
// order, then the domains.
func (p *Policy) String() string {
	var b strings.Builder
	b.WriteString("default " + p.Default.String() + "\n")
	for _, r := range p.Rules {
		b.WriteString(r.Verdict.String() + " " + prefixText(r.Prefix) + "\n")
	}
	for _, d := range p.Domains {
		b.WriteString("allow " + d.String() + "\n")
	}
	return b.String()
}

// prefixText writes a single address without its length.
func prefixText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// canonical sorts and deduplicates p's rules and domains: IPv4 before
// IPv6, then by address, shorter prefix first, deny before allow.
func (p *Policy) canonical() {
	slices.SortFunc(p.Rules, func(a, b Rule) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		if c := a.Prefix.Bits() - b.Prefix.Bits(); c != 0 {
			return c
		}
		return int(a.Verdict) - int(b.Verdict)
	})
	p.Rules = slices.Compact(p.Rules)
	slices.SortFunc(p.Domains, func(a, b Domain) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return boolInt(a.Wildcard) - boolInt(b.Wildcard)
	})
	p.Domains = slices.Compact(p.Domains)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
