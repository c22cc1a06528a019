package resolver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sandfs/netpolicy"
)

// FuzzAnswer: whatever bytes a guest sends, Answer does not panic, and
// what it sends back is a response with the query's ID. (The policy
// allows no name, so nothing reaches an upstream.)
func FuzzAnswer(f *testing.F) {
	for _, n := range []string{"example.com.", "a.b.c.", "."} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		m, _ := b.Finish()
		f.Add(m)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0x80, 0, 0, 1})
	pol := &netpolicy.Policy{}
	r := &Resolver{Policy: func() *netpolicy.Policy { return pol }, Upstream: "127.0.0.1:9",
		Learn: func(string, []netip.Addr, time.Duration) { panic("learned from a refused name") }}
	f.Fuzz(func(t *testing.T, q []byte) {
		a := r.Answer(context.Background(), q)
		if a == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(a)
		if err != nil || !h.Response || len(q) < 2 || h.ID != uint16(q[0])<<8|uint16(q[1]) {
			t.Errorf("Answer(%x) = %x (%+v, %v); want a response with the query's ID", q, a, h, err)
		}
	})
}
