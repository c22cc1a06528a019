package labnet

import (
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS answers every A query from Names (name → address; a name →
// "cname:<target>" is a CNAME whose target is looked up too), NXDOMAIN
// for the rest, and records the names it was asked.
type DNS struct {
	Names map[string]string
	mu    sync.Mutex
	asked []string
}

// Serve answers the queries that come to pc until it is closed.
func (s *DNS) Serve(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if m := s.answer(buf[:n], ""); m != nil {
			pc.WriteTo(m, from)
		}
	}
}

// ServeTCP answers one query per connection on ln (RFC 7766 framing);
// the names it is asked are recorded as "tcp:<name>".
func (s *DNS) ServeTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			q := make([]byte, int(l[0])<<8|int(l[1]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			if m := s.answer(q, "tcp:"); m != nil {
				c.Write(append([]byte{byte(len(m) >> 8), byte(len(m))}, m...))
			}
		}()
	}
}

// answer is the reply to query msg (nil: none); the name asked is
// recorded with prefix.
func (s *DNS) answer(msg []byte, prefix string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(q.Name.String(), ".")
	s.mu.Lock()
	s.asked = append(s.asked, prefix+name)
	s.mu.Unlock()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	found := false
	for i := 0; i < 4 && q.Type == dnsmessage.TypeA; i++ {
		v, ok := s.Names[name]
		if !ok {
			break
		}
		rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name + "."), Class: dnsmessage.ClassINET, TTL: 300}
		if target, ok := strings.CutPrefix(v, "cname:"); ok {
			b.CNAMEResource(rh, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(target + ".")})
			name = target
			continue
		}
		b.AResource(rh, dnsmessage.AResource{A: [4]byte(net.ParseIP(v).To4())})
		found = true
		break
	}
	m, _ := b.Finish()
	if !found && q.Type == dnsmessage.TypeA {
		h2 := dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeNameError}
		b = dnsmessage.NewBuilder(nil, h2)
		b.StartQuestions()
		b.Question(q)
		m, _ = b.Finish()
	}
	return m
}

// Forget clears the record of the names asked.
func (s *DNS) Forget() {
	s.mu.Lock()
	s.asked = nil
	s.mu.Unlock()
}

// WasAsked reports whether name (with its "tcp:" prefix if over TCP)
// was asked.
func (s *DNS) WasAsked(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.asked {
		if a == name {
			return true
		}
	}
	return false
}
