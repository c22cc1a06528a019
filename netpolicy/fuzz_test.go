package netpolicy

import (
	"bytes"
	"net/netip"
	"testing"

	"sandfs/ctl/msg"
)

// FuzzParse: Parse never panics, fails only with EINVAL or E2BIG, and a
// policy it accepts prints to text that parses to the same policy and
// the same verdicts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "default deny\n", "default allow\ndeny 10.0.0.0/8\n",
		"allow 10.0.0.0/8\ndeny 10.1.0.0/16\nallow example.com\nallow *.example.com\n",
		"allow 2001:db8::/32 # docs\ndeny 2001:db8::1\n", "allow 10.0.0.1/8", "deny x.com",
		"allow ::ffff:1.2.3.4", "allow a.123", "\tallow\t1.2.3.4\t#\n",
	} {
		f.Add([]byte(s))
	}
	probes := []netip.Addr{
		netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("1.2.3.4"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::1"),
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := Parse(in)
		if err != nil {
			if en := msg.Errno(err); en != 22 && en != 7 { // EINVAL, E2BIG
				t.Fatalf("Parse(%q) errno %v", in, en)
			}
			if bytes.Contains([]byte(err.Error()), []byte("\n")) {
				t.Fatalf("Parse(%q) error text has a newline: %q", in, err)
			}
			return
		}
		text := p.String()
		q, err := Parse([]byte(text))
		if err != nil {
			t.Fatalf("Parse(String()) of %q: %v", text, err)
		}
		if q.String() != text {
			t.Fatalf("not canonical: %q then %q", text, q.String())
		}
		for _, a := range probes {
			if p.Decide(a) != q.Decide(a) {
				t.Fatalf("Decide(%s) differs after a round trip of %q", a, text)
			}
		}
	})
}
