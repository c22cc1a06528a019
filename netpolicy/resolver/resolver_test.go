package resolver

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sandfs/netpolicy"
)

// upstream is a fake host resolver on the loopback: a.example.com is a
// CNAME of b.cdn.test (TTL 60) whose A is 192.0.2.7 (TTL 30); the answer
// also carries an A of an unrelated name, which must not be learned.
func upstream(t *testing.T) (string, *atomic.Int32) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int32
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			n.Add(1)
			var p dnsmessage.Parser
			h, err := p.Start(buf[:k])
			if err != nil {
				continue
			}
			q, _ := p.Question()
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true})
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			name := func(s string) dnsmessage.Name { return dnsmessage.MustNewName(s) }
			b.CNAMEResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.CNAMEResource{CNAME: name("b.cdn.test.")})
			b.AResource(dnsmessage.ResourceHeader{Name: name("b.cdn.test."), Class: dnsmessage.ClassINET, TTL: 30}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 7}})
			b.AResource(dnsmessage.ResourceHeader{Name: name("evil.test."), Class: dnsmessage.ClassINET, TTL: 30}, dnsmessage.AResource{A: [4]byte{203, 0, 113, 9}})
			m, _ := b.Finish()
			pc.WriteTo(m, from)
		}
	}()
	return pc.LocalAddr().String(), &n
}

func query(t *testing.T, id uint16, names ...string) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	for _, n := range names {
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func rcode(t *testing.T, a []byte, id uint16) dnsmessage.RCode {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(a)
	if err != nil || !h.Response || h.ID != id {
		t.Fatalf("answer header %+v, %v; want a response to %d", h, err, id)
	}
	return h.RCode
}

// TestAnswer: an allowed name is forwarded and its addresses (through
// the CNAME, not the unrelated record) learned for the chain's smallest
// TTL; another name gets NXDOMAIN without reaching the upstream; two
// questions get FORMERR; bytes that are no query get nothing.
func TestAnswer(t *testing.T) {
	up, calls := upstream(t)
	pol, err := netpolicy.Parse([]byte("allow *.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	var learned []netip.Addr
	var ttl time.Duration
	var events []Event
	r := &Resolver{
		Policy:   func() *netpolicy.Policy { return pol },
		Upstream: up,
		Learn:    func(_ string, a []netip.Addr, d time.Duration) { learned, ttl = a, d },
		Log:      func(e Event) { events = append(events, e) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rc := rcode(t, r.Answer(ctx, query(t, 7, "A.Example.com.")), 7); rc != dnsmessage.RCodeSuccess {
		t.Errorf("allowed name: rcode %v", rc)
	}
	if len(learned) != 1 || learned[0] != netip.MustParseAddr("192.0.2.7") || ttl != 30*time.Second {
		t.Errorf("learned %v for %v; want [192.0.2.7] for 30s", learned, ttl)
	}
	learned = nil
	if rc := rcode(t, r.Answer(ctx, query(t, 8, "example.com.")), 8); rc != dnsmessage.RCodeNameError {
		t.Errorf("name not allowed: rcode %v; want NXDOMAIN", rc)
	}
	if rc := rcode(t, r.Answer(ctx, query(t, 9, "a.example.com.", "b.example.com.")), 9); rc != dnsmessage.RCodeFormatError {
		t.Errorf("two questions: rcode %v; want FORMERR", rc)
	}
	if a := r.Answer(ctx, []byte{1, 2, 3}); a != nil {
		t.Errorf("garbage answered: %x", a)
	}
	if calls.Load() != 1 || learned != nil {
		t.Errorf("upstream asked %d times (want 1), learned %v after", calls.Load(), learned)
	}
	if len(events) != 2 || events[0].Verdict != "answered" || events[1].Verdict != "refused" || events[1].Name != "example.com" {
		t.Errorf("events %+v", events)
	}
}

// TestServe: the resolver answers over a packet connection.
func TestServe(t *testing.T) {
	up, _ := upstream(t)
	pol, _ := netpolicy.Parse([]byte("allow a.example.com"))
	r := &Resolver{Policy: func() *netpolicy.Policy { return pol }, Upstream: up, Learn: func(string, []netip.Addr, time.Duration) {}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Serve(pc) }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(query(t, 42, "a.example.com."))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if rc := rcode(t, buf[:n], 42); rc != dnsmessage.RCodeSuccess {
		t.Errorf("rcode %v", rc)
	}
	pc.Close()
	if err := <-done; err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

// TestResend: upstream gets the guest's one question in a query of the
// resolver's own (the ID, RD and our EDNS record), never what else the
// guest's message carried (here a TXT record in the authority and the
// additional sections, full of data the guest wants out).
func TestResend(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 4096)
		k, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		got <- append([]byte(nil), buf[:k]...)
		var p dnsmessage.Parser
		h, _ := p.Start(buf[:k])
		q, _ := p.Question()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true})
		b.StartQuestions()
		b.Question(q)
		m, _ := b.Finish()
		pc.WriteTo(m, from)
	}()
	pol, err := netpolicy.Parse([]byte("allow a.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	r := &Resolver{Policy: func() *netpolicy.Policy { return pol }, Upstream: pc.LocalAddr().String(),
		Learn: func(string, []netip.Addr, time.Duration) {}}
	const secret = "the guest's secret"
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true, CheckingDisabled: true})
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("a.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	txt := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("x.test."), Class: dnsmessage.ClassINET, TTL: 1}
	b.StartQuestions()
	b.Question(q)
	b.StartAuthorities()
	b.TXTResource(txt, dnsmessage.TXTResource{TXT: []string{secret}})
	b.StartAdditionals()
	b.TXTResource(txt, dnsmessage.TXTResource{TXT: []string{secret}})
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rc := rcode(t, r.Answer(ctx, m), 42); rc != dnsmessage.RCodeSuccess {
		t.Errorf("rcode %v", rc)
	}
	sent := <-got
	if strings.Contains(string(sent), secret) {
		t.Errorf("upstream got the guest's other records: %q", sent)
	}
	var p dnsmessage.Parser
	h, err := p.Start(sent)
	if err != nil || h.ID != 42 || !h.RecursionDesired || h.CheckingDisabled {
		t.Errorf("upstream's header %+v, %v; want ID 42, RD only", h, err)
	}
	qs, _ := p.AllQuestions()
	p.SkipAllAnswers()
	auth, _ := p.AllAuthorities()
	add, _ := p.AllAdditionals()
	if len(qs) != 1 || qs[0] != q || len(auth) != 0 || len(add) != 1 || add[0].Header.Type != dnsmessage.TypeOPT {
		t.Errorf("upstream got questions %v, authorities %v, additionals %v; want the one question and our OPT", qs, auth, add)
	}
}
