package sbnet

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"sandfs/netpolicy"
	"sandfs/netpolicy/resolver"
)

// Audit lines (net/audit, docs/network.md), one per connection allowed
// or refused and per DNS answer given or refused, in fixed field order:
//
//	time proto destination domain verdict bytes
//	2026-12-01T19:01:01.778Z tcp 198.51.100.1:8080 allowed.test allow 60
//	2026-12-01T19:01:02.001Z udp 192.0.2.9:53 - drop 43
//	2026-12-01T19:01:03.120Z dns 198.51.100.1 allowed.test answered 62
//	2026-12-01T19:01:04.500Z dns - other.test refused 0
//	2026-12-01T19:01:09.310Z tcp 198.51.100.1:8080 allowed.test closed 8042 out=1240 in=6802
//
// A connection's allow, reset or drop line has the bytes of its first
// packet; an allowed TCP connection gets a second line when it has
// ended (flowLine), with its totals; a DNS line has the answer's bytes.
// domain is the name an answer opened the destination for, "-" if none.
const auditTime = "2006-01-02T15:04:05.000Z07:00"

// SetAudit makes fn get n's audit lines (nil: none); lines before it are
// not kept.
func (n *Net) SetAudit(fn func(line string)) {
	n.mu.Lock()
	n.auditFn = fn
	n.mu.Unlock()
}

// audit sends line to the audit function, if any.
func (n *Net) audit(line string) {
	n.mu.Lock()
	fn := n.auditFn
	n.mu.Unlock()
	if fn != nil {
		fn(line)
	}
}

// readEvents turns the filter's events into audit lines until the
// filter is closed or released. Before an event, and after a second
// without one, the events the program did not send since the last such
// line (over its rate limit, or not taken by a full ring) make a line
// (missed), so nothing is left out silently.
func (n *Net) readEvents(f *netpolicy.Filter) {
	var m missed
	f.ReadEvents(func(e netpolicy.Event) {
		m.report(n, f)
		dst := e.Dst.String()
		if e.Port != 0 {
			dst = netip.AddrPortFrom(e.Dst, e.Port).String()
		}
		n.audit(fmt.Sprintf("%s %s %s %s %s %d", e.Time.UTC().Format(auditTime), netpolicy.ProtoName(e.Proto),
			dst, auditName(n.domainOf(e.Dst)), e.Verdict, e.Len))
	}, func() { m.report(n, f) })
}

// missed counts the events a filter did not send that lines reported:
//
//	2026-12-01T19:01:05.000Z - - - suppressed 1234   (over the rate limit)
//	2026-12-01T19:01:05.000Z - - - lost 17           (the ring was full)
//	2026-12-01T19:01:05.000Z - - - untracked 3       (connections allowed, no totals: FlowsMax open)
//
// The last field is the number of events since the previous such line;
// the time is when the daemon noticed.
type missed struct {
	suppressed, lost, untracked uint64 // reported so far (the filter's counters)
}

// report writes n's lines for f's counters' news (one reader: no lock).
func (m *missed) report(n *Net, f *netpolicy.Filter) {
	c, err := f.Counters()
	if err != nil {
		return
	}
	now := time.Now().UTC().Format(auditTime)
	for _, k := range []struct {
		verdict string
		seen    *uint64
		count   uint64
	}{{"suppressed", &m.suppressed, c[netpolicy.CountSuppressed]}, {"lost", &m.lost, c[netpolicy.CountLost]},
		{"untracked", &m.untracked, c[netpolicy.CountUntracked]}} {
		if k.count > *k.seen {
			n.audit(fmt.Sprintf("%s - - - %s %d", now, k.verdict, k.count-*k.seen))
			*k.seen = k.count
		}
	}
}

// flowIdle is how long an allowed TCP connection may go without a
// packet before its totals are reported ("idle"; later packets are not
// counted).
const flowIdle = 10 * time.Minute

// readFlows writes a line for each allowed TCP connection of f that has
// ended (netpolicy.Filter.EndedFlows), each second, until the filter is
// closed or released.
func (n *Net) readFlows(f *netpolicy.Filter) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for range t.C {
		fl, err := f.EndedFlows(flowIdle, false)
		if err != nil {
			return
		}
		n.flowLines(fl)
	}
}

// flowLines writes fl's lines:
//
//	time proto destination domain end bytes out=N in=N
//
// time is the connection's last packet, end how it ended (closed,
// aborted, idle, open), bytes its total both ways, then the guest's
// bytes sent (out) and received (in), Ethernet headers included.
func (n *Net) flowLines(fl []netpolicy.Flow) {
	for _, f := range fl {
		n.audit(fmt.Sprintf("%s tcp %s %s %s %d out=%d in=%d", f.Last.UTC().Format(auditTime), netip.AddrPortFrom(f.Dst, f.Port),
			auditName(n.domainOf(f.Dst)), f.End, f.Out+f.In, f.Out, f.In))
	}
}

// domainOf is the name an answer opened a for, "-" if none.
func (n *Net) domainOf(a netip.Addr) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.learned[a]; ok {
		return l.name
	}
	return "-"
}

// dnsLine is the audit line of a resolver event.
func dnsLine(e resolver.Event) string {
	dst := "-"
	if len(e.Addrs) > 0 {
		s := make([]string, len(e.Addrs))
		for i, a := range e.Addrs {
			s[i] = a.String()
		}
		dst = strings.Join(s, ",")
	}
	return time.Now().UTC().Format(auditTime) + " dns " + dst + " " + auditName(e.Name) + " " + e.Verdict + " " + strconv.Itoa(e.Size)
}

// auditName is name as one field of an audit line: a name comes from the
// guest's query, and DNS labels may hold any byte (a newline would forge
// a line, a space a field), so every byte but letters, digits and
// "-_.*" is written as \xHH.
func auditName(name string) string {
	if name == "" {
		return "-"
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.*", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	return b.String()
}
