package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"sandfs/ctl/msg"
)

func pfx(s string) netip.Prefix {
	if !strings.Contains(s, "/") {
		a := netip.MustParseAddr(s)
		return netip.PrefixFrom(a, a.BitLen())
	}
	return netip.MustParsePrefix(s)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     *Policy
		canon    string
	}{
		{"empty", "", &Policy{}, "default deny\n"},
		{"comments", "# nothing\n\n  \t# more\n", &Policy{}, "default deny\n"},
		{"default allow", "default allow", &Policy{Default: Allow}, "default allow\n"},
		{"cidrs", "allow 10.0.0.0/8\ndeny 10.1.0.0/16 # lab\nallow 2001:db8::/32\ndeny 2001:db8::1\n", &Policy{Rules: []Rule{
			{Allow, pfx("10.0.0.0/8")}, {Deny, pfx("10.1.0.0/16")}, {Allow, pfx("2001:db8::/32")}, {Deny, pfx("2001:db8::1")},
		}}, "default deny\nallow 10.0.0.0/8\ndeny 10.1.0.0/16\nallow 2001:db8::/32\ndeny 2001:db8::1\n"},
		{"canonical order and dups", "allow 10.1.0.0/16\nallow 10.0.0.0/8\nallow 10.0.0.0/8\nallow ::/0\nallow 1.2.3.4/32\n", &Policy{Rules: []Rule{
			{Allow, pfx("1.2.3.4")}, {Allow, pfx("10.0.0.0/8")}, {Allow, pfx("10.1.0.0/16")}, {Allow, pfx("::/0")},
		}}, "default deny\nallow 1.2.3.4\nallow 10.0.0.0/8\nallow 10.1.0.0/16\nallow ::/0\n"},
		{"deny before allow at equal prefix", "allow 10.0.0.1\ndeny 10.0.0.1\n", &Policy{Rules: []Rule{
			{Deny, pfx("10.0.0.1")}, {Allow, pfx("10.0.0.1")},
		}}, "default deny\ndeny 10.0.0.1\nallow 10.0.0.1\n"},
		{"domains", "allow Example.COM.\nallow *.example.com\nallow example.com\n\tallow\t_srv.x-1.io", &Policy{Domains: []Domain{
			{Name: "_srv.x-1.io"}, {Name: "example.com"}, {Name: "example.com", Wildcard: true},
		}}, "default deny\nallow _srv.x-1.io\nallow example.com\nallow *.example.com\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tc.in, err)
			}
			if d := cmp.Diff(tc.want, p, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
				t.Errorf("Parse(%q) -want +got:\n%s", tc.in, d)
			}
			if got := p.String(); got != tc.canon {
				t.Errorf("String() = %q; want %q", got, tc.canon)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in    string
		errno syscall.Errno
		text  string
	}{
		{"permit 10.0.0.0/8", syscall.EINVAL, `policy: line 1: unknown verb "permit"`},
		{"allow", syscall.EINVAL, `policy: line 1: want 2 words, not 1, in "allow"`},
		{"\nallow 10.0.0.0/8 now", syscall.EINVAL, `policy: line 2: want 2 words, not 3, in "allow 10.0.0.0/8 now"`},
		{"default maybe", syscall.EINVAL, `policy: line 1: default: want allow or deny, not "maybe"`},
		{"default deny\ndefault allow", syscall.EINVAL, `policy: line 2: default: given twice`},
		{"allow 10.0.0.1/8", syscall.EINVAL, `policy: line 1: host bits set in "10.0.0.1/8" (the prefix is 10.0.0.0/8)`},
		{"allow 10.0.0.0/33", syscall.EINVAL, `policy: line 1: bad address "10.0.0.0/33"`},
		{"allow 1.2.3", syscall.EINVAL, `policy: line 1: bad address "1.2.3"`},
		{"allow 256.0.0.1", syscall.EINVAL, `policy: line 1: bad address "256.0.0.1"`},
		{"allow ::ffff:1.2.3.4", syscall.EINVAL, `policy: line 1: IPv4-mapped address "::ffff:1.2.3.4": write the IPv4 address`},
		{"allow fe80::1%eth0", syscall.EINVAL, `policy: line 1: address with a zone "fe80::1%eth0"`},
		{"deny example.com", syscall.EINVAL, `policy: line 1: deny: domains can only be allowed, not "example.com"`},
		{"allow *.*.example.com", syscall.EINVAL, `policy: line 1: bad domain "*.*.example.com": only letters, digits, '-' and '_' in labels`},
		{"allow a..b", syscall.EINVAL, `policy: line 1: bad domain "a..b": a label of length 0`},
		{"allow -a.com", syscall.EINVAL, `policy: line 1: bad domain "-a.com": a label starts or ends with '-'`},
		{"allow a.123", syscall.EINVAL, `policy: line 1: bad domain "a.123": the last label is all digits`},
		{"allow *.", syscall.EINVAL, `policy: line 1: bad domain "*.": length 0, want 1 to 253`},
		{"allow " + strings.Repeat("a", 64) + ".com", syscall.EINVAL, `policy: line 1: bad domain "` + strings.Repeat("a", 64) + `"...: a label of length 64`},
		{"allow \xff", syscall.EINVAL, `policy: not UTF-8`},
		{strings.Repeat("#", TextMax+1), syscall.E2BIG, `policy: 65537 bytes, at most 65536`},
	} {
		p, err := Parse([]byte(tc.in))
		var e *msg.Error
		if !errors.As(err, &e) || e.Errno != tc.errno || e.Text != tc.text {
			t.Errorf("Parse(%.40q) = %v, %v; want %v %q", tc.in, p, err, tc.errno, tc.text)
		}
	}
}

// TestParseBounds: more rules or domains than the maps hold is E2BIG.
func TestParseBounds(t *testing.T) {
	var b strings.Builder
	for i := range RulesMax + 1 {
		b.WriteString("allow " + netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + "\n")
	}
	if _, err := Parse([]byte(b.String())); msg.Errno(err) != syscall.E2BIG {
		t.Errorf("Parse(%d rules) = %v; want E2BIG", RulesMax+1, err)
	}
	b.Reset()
	for i := range DomainMax + 1 {
		b.WriteString("allow d" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ".example\n")
	}
	if _, err := Parse([]byte(b.String())); msg.Errno(err) != syscall.E2BIG {
		t.Errorf("Parse(%d domains) = %v; want E2BIG", DomainMax+1, err)
	}
}

func TestDecide(t *testing.T) {
	p := &Policy{Rules: []Rule{
		{Allow, pfx("10.0.0.0/8")}, {Deny, pfx("10.1.0.0/16")}, {Allow, pfx("10.1.2.0/24")},
		{Allow, pfx("10.9.9.9")}, {Deny, pfx("10.9.9.9")}, {Allow, pfx("2001:db8::/32")},
	}}
	for _, tc := range []struct {
		addr string
		want Verdict
	}{
		{"10.2.3.4", Allow}, {"10.1.3.4", Deny}, {"10.1.2.3", Allow}, {"10.9.9.9", Deny},
		{"11.0.0.1", Deny}, {"2001:db8::5", Allow}, {"2001:db9::5", Deny}, {"::ffff:10.2.3.4", Allow},
	} {
		if got := p.Decide(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Decide(%s) = %v; want %v", tc.addr, got, tc.want)
		}
	}
	p.Default = Allow
	if got := p.Decide(netip.MustParseAddr("11.0.0.1")); got != Allow {
		t.Errorf("default allow: Decide(11.0.0.1) = %v", got)
	}
}

func TestAllowsName(t *testing.T) {
	p, err := Parse([]byte("allow example.com\nallow *.pkg.dev\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"example.com": true, "EXAMPLE.com.": true, "a.example.com": false, "xexample.com": false,
		"pkg.dev": false, "a.pkg.dev": true, "a.b.pkg.dev": true, "apkg.dev": false, "": false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v; want %v", name, got, want)
		}
	}
}
