package resolver

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sandfs/netpolicy"
)

// bigAnswers is how many A records the TCP upstream gives: more than a
// UDP answer of MaxQuery bytes holds.
const bigAnswers = 200

// upstreamTCP is a fake host resolver over TCP on the loopback: any
// name has bigAnswers A records, 198.18.0.1 and up (TTL 60).
func upstreamTCP(t *testing.T) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			q, err := readMsg(c, MaxQuery)
			if err != nil {
				c.Close()
				continue
			}
			var p dnsmessage.Parser
			h, _ := p.Start(q)
			qu, _ := p.Question()
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true})
			b.StartQuestions()
			b.Question(qu)
			b.StartAnswers()
			for i := range bigAnswers {
				b.AResource(dnsmessage.ResourceHeader{Name: qu.Name, Class: dnsmessage.ClassINET, TTL: 60},
					dnsmessage.AResource{A: [4]byte{198, 18, byte(i >> 8), byte(i + 1)}})
			}
			m, _ := b.Finish()
			writeMsg(c, m)
			c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// TestServeTCP: over TCP, an allowed name's answer comes whole (larger
// than any UDP answer the guest takes: all its addresses learned), two
// queries on one connection are answered in order, a name not allowed
// gets NXDOMAIN without reaching the upstream, and a message of bad
// length ends the connection.
func TestServeTCP(t *testing.T) {
	up, calls := upstreamTCP(t)
	pol, _ := netpolicy.Parse([]byte("allow big.example.com"))
	var mu sync.Mutex
	var learned []netip.Addr
	r := &Resolver{Policy: func() *netpolicy.Policy { return pol }, Upstream: up,
		Learn: func(_ string, a []netip.Addr, _ time.Duration) { mu.Lock(); learned = a; mu.Unlock() }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.ServeTCP(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, q := range []struct {
		id   uint16
		name string
		rc   dnsmessage.RCode
	}{{1, "big.example.com.", dnsmessage.RCodeSuccess}, {2, "other.example.com.", dnsmessage.RCodeNameError}} {
		if err := writeMsg(c, query(t, q.id, q.name)); err != nil {
			t.Fatal(err)
		}
		a, err := readMsg(c, maxAnswerTCP)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		if rc := rcode(t, a, q.id); rc != q.rc {
			t.Errorf("%s: rcode %v; want %v", q.name, rc, q.rc)
		}
		if q.rc == dnsmessage.RCodeSuccess && len(a) <= MaxQuery {
			t.Errorf("%s: answer of %d bytes; want more than a UDP one (%d)", q.name, len(a), MaxQuery)
		}
	}
	mu.Lock()
	if len(learned) != bigAnswers {
		t.Errorf("learned %d addresses; want all %d", len(learned), bigAnswers)
	}
	mu.Unlock()
	if calls.Load() != 1 {
		t.Errorf("upstream asked %d times; want 1 (the allowed name)", calls.Load())
	}
	c.Write([]byte{0xff, 0xff}) // more than MaxQuery
	if _, err := readMsg(c, maxAnswerTCP); err == nil {
		t.Error("a message of 65535 bytes announced got an answer; want the connection closed")
	}
	ln.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeTCP after Close: %v", err)
	}
}
