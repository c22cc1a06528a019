package sbnet

import (
	"strings"
	"testing"

	"sandfs/netpolicy/resolver"
)

// TestAuditNameOneField: a guest's query name with a newline or spaces
// (DNS labels may hold any byte) stays one field of one audit line.
func TestAuditNameOneField(t *testing.T) {
	l := dnsLine(resolver.Event{Name: "x 1.2.3.4 evil.test answered 1\n2026-12-01T00:00:00.000Z tcp 1.2.3.4:80 a.test allow", Verdict: "refused"})
	if strings.Contains(l, "\n") || len(strings.Fields(l)) != 6 {
		t.Errorf("line %q: want one line of 6 fields", l)
	}
	if got := auditName("a.cname.test"); got != "a.cname.test" {
		t.Errorf("auditName of a plain name: %q", got)
	}
	if got := auditName("a b"); got != `a\x20b` {
		t.Errorf("auditName(%q) = %q", "a b", got)
	}
}
