// Package resolver is a sandbox's DNS resolver: the only name server its
// guest can reach (docs/network.md). It answers a query for a name its
// policy's domains allow by forwarding it to the host's resolver and
// passing the answer back; every A and AAAA record the answer gives for
// the name (directly or through its CNAMEs) is handed to Learn, which
// puts the address in the sandbox's allow list for the record's TTL. Any
// other name gets NXDOMAIN, made here: the host's resolver never sees
// it, so DNS carries nothing out of a sandbox but allowed names.
//
// Every byte from the guest is hostile: a query is at most MaxQuery
// bytes with exactly one question of class IN, else it is refused
// (FORMERR) or dropped when it cannot be parsed at all. Upstream answers
// are bounded by MaxAnswer and must answer the query's ID and question.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sandfs/netpolicy"
)

// Bounds on what the resolver reads and waits for.
const (
	MaxQuery   = 1232 // the EDNS payload size DNS flag day 2020 recommends
	MaxAnswer  = 4096
	MaxCNAMEs  = 8 // links followed from the question's name
	Timeout    = 3 * time.Second
	MinTTL     = 5 * time.Second // an address is allowed at least this long
	MaxTTL     = time.Hour       // and at most this long per answer
	maxWorkers = 16              // queries forwarded at once per sandbox
)

// Event is one query's outcome, for the audit stream: the name, the
// verdict ("answered", "refused": not allowed, "failed": upstream) and
// the addresses learned.
type Event struct {
	Name    string
	Type    dnsmessage.Type
	Verdict string
	Addrs   []netip.Addr
	Size    int // the answer's bytes
	Err     error
}

// Resolver answers one sandbox's queries. Policy, Upstream and Learn are
// required.
type Resolver struct {
	// Policy is the sandbox's policy in force (its Domains are read).
	Policy func() *netpolicy.Policy
	// Upstream is the host's resolver, "host:port", asked over UDP, or
	// over TCP for a query that came over TCP (ServeTCP).
	Upstream string
	// Learn allows addrs (from an answer for name) for ttl.
	Learn func(name string, addrs []netip.Addr, ttl time.Duration)
	// Log, if set, gets every query's outcome.
	Log func(Event)
}

// Serve answers the queries arriving on pc until pc is closed.
func (r *Resolver) Serve(pc net.PacketConn) error {
	sem := make(chan struct{}, maxWorkers)
	buf := make([]byte, MaxQuery+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if n > MaxQuery {
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		default:
			continue // too many at once: dropped, the guest retries
		}
		go func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			if a := r.Answer(ctx, q); a != nil {
				pc.WriteTo(a, from)
			}
		}()
	}
}

// Answer returns the reply to query q, which came over UDP (forwarded
// over UDP), or nil when q is not a DNS message at all (nothing is sent
// back).
func (r *Resolver) Answer(ctx context.Context, q []byte) []byte {
	return r.answer(ctx, q, false)
}

// answer is Answer for a query that came over UDP or TCP (forwarded the
// same way: an answer too large for UDP comes back truncated, and the
// guest's retry over TCP gets it whole).
func (r *Resolver) answer(ctx context.Context, q []byte, tcp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || qs[0].Class != dnsmessage.ClassINET || h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	question := qs[0]
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	ev := Event{Name: name, Type: question.Type}
	var a []byte
	defer func() {
		ev.Size = len(a)
		if r.Log != nil {
			r.Log(ev)
		}
	}()
	if !r.Policy().AllowsName(name) {
		ev.Verdict = "refused"
		a = reply(h, qs, dnsmessage.RCodeNameError)
		return a
	}
	// Upstream gets a query of our own with the guest's one question,
	// not the guest's bytes (resend).
	fq, err := resend(h, question)
	switch {
	case err != nil:
	case tcp:
		a, err = r.forwardTCP(ctx, fq)
	default:
		a, err = r.forward(ctx, fq)
	}
	if err == nil {
		err = answers(a, h.ID, question)
	}
	if err != nil {
		ev.Verdict, ev.Err = "failed", err
		a = reply(h, qs, dnsmessage.RCodeServerFailure)
		return a
	}
	addrs, ttl := records(a, name)
	if len(addrs) > 0 {
		r.Learn(name, addrs, ttl)
	}
	ev.Verdict, ev.Addrs = "answered", addrs
	return a
}

// reply is an answer to the query with header h and questions qs that
// has no records and rcode rc.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rc dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rc})
	b.EnableCompression()
	if len(qs) == 1 {
		if b.StartQuestions() != nil || b.Question(qs[0]) != nil {
			return nil
		}
	}
	m, err := b.Finish()
	if err != nil {
		return nil
	}
	return m
}

// resend is the query sent upstream for the guest's query with header h
// and question q: its ID, its RD bit and q, re-encoded, and our own EDNS
// record (payload size MaxAnswer). Nothing else the guest sent leaves
// the sandbox: not its other sections (records it may fill with what it
// likes), flags or EDNS options, nor the layout of its message.
func resend(h dnsmessage.Header, q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, RecursionDesired: h.RecursionDesired})
	var opt dnsmessage.ResourceHeader
	err := b.StartQuestions()
	if err == nil {
		err = b.Question(q)
	}
	if err == nil {
		err = b.StartAdditionals()
	}
	if err == nil {
		err = opt.SetEDNS0(MaxAnswer, dnsmessage.RCodeSuccess, false)
	}
	if err == nil {
		err = b.OPTResource(opt, dnsmessage.OPTResource{})
	}
	if err != nil {
		return nil, fmt.Errorf("re-encoding the query: %w", err)
	}
	return b.Finish()
}

// answers checks that upstream's answer a carries id and answers
// question.
func answers(a []byte, id uint16, question dnsmessage.Question) error {
	var p dnsmessage.Parser
	h, err := p.Start(a)
	if err != nil || !h.Response || h.ID != id {
		return fmt.Errorf("upstream answered another query")
	}
	if qs, err := p.AllQuestions(); err != nil || len(qs) != 1 || !strings.EqualFold(qs[0].Name.String(), question.Name.String()) || qs[0].Type != question.Type {
		return fmt.Errorf("upstream answered another question")
	}
	return nil
}

// forward sends q to the upstream resolver over UDP and returns the
// first response that carries q's ID.
func (r *Resolver) forward(ctx context.Context, q []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", r.Upstream)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, MaxAnswer)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || !h.Response || n < 2 || h.ID != uint16(q[0])<<8|uint16(q[1]) {
			continue // not the answer: keep waiting until the deadline
		}
		return append([]byte(nil), buf[:n]...), nil
	}
}

// records are the A and AAAA addresses answer a gives for name, directly
// or through a chain of at most MaxCNAMEs CNAMEs, and the smallest TTL
// among the records on the way, clamped to [MinTTL, MaxTTL].
func records(a []byte, name string) ([]netip.Addr, time.Duration) {
	var p dnsmessage.Parser
	if _, err := p.Start(a); err != nil {
		return nil, 0
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0
	}
	rrs, err := p.AllAnswers()
	if err != nil {
		return nil, 0
	}
	key := func(n dnsmessage.Name) string { return strings.TrimSuffix(strings.ToLower(n.String()), ".") }
	cname := map[string]string{}
	ttls := map[string]uint32{}
	for _, rr := range rrs {
		if c, ok := rr.Body.(*dnsmessage.CNAMEResource); ok {
			cname[key(rr.Header.Name)] = key(c.CNAME)
			ttls[key(rr.Header.Name)] = rr.Header.TTL
		}
	}
	chain := map[string]bool{name: true}
	minTTL := uint32(MaxTTL / time.Second)
	for n, i := name, 0; i < MaxCNAMEs; i++ {
		next, ok := cname[n]
		if !ok || chain[next] {
			break
		}
		minTTL = min(minTTL, ttls[n])
		chain[next] = true
		n = next
	}
	var addrs []netip.Addr
	for _, rr := range rrs {
		if !chain[key(rr.Header.Name)] {
			continue
		}
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			addrs = append(addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			addrs = append(addrs, netip.AddrFrom16(b.AAAA))
		default:
			continue
		}
		minTTL = min(minTTL, rr.Header.TTL)
	}
	ttl := max(time.Duration(minTTL)*time.Second, MinTTL)
	return addrs, min(ttl, MaxTTL)
}
