package netpolicy

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// TestDocExample: the example of docs/network.md parses to the
// canonical text and verdicts the document gives.
func TestDocExample(t *testing.T) {
	b, err := os.ReadFile("../docs/network.md")
	must(t, err)
	doc := string(b)
	_, rest, _ := strings.Cut(doc, "Example:\n\n")
	example, rest, _ := strings.Cut(rest, "\n\n")
	_, rest, _ = strings.Cut(rest, "Its canonical text:\n\n")
	canon, _, _ := strings.Cut(rest, "\n\n")
	unindent := func(s string) string { return strings.ReplaceAll(strings.TrimPrefix(s, "    "), "\n    ", "\n") + "\n" }
	p, err := Parse([]byte(unindent(example)))
	must(t, err)
	if got, want := p.String(), unindent(canon); got != want {
		t.Errorf("canonical text:\n%s\nwant (docs/network.md):\n%s", got, want)
	}
	for addr, want := range map[string]Verdict{
		"10.2.3.4": Allow, "10.1.9.9": Deny, "10.1.2.3": Allow, "192.0.2.1": Deny, "2001:db8::5": Allow,
	} {
		if got := p.Decide(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Decide(%s) = %v; docs/network.md says %v", addr, got, want)
		}
	}
}
