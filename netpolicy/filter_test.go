package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

func mustParse(t testing.TB, text string) *Policy {
	t.Helper()
	p, err := Parse([]byte(text))
	must(t, err)
	return p
}

func TestDefaultDeny(t *testing.T) {
	tp := newTopo(t, mustParse(t, "default deny\n"))
	s := tp.serve(t)
	for _, a := range servers {
		tp.wantTCP(t, a, false)
		tp.wantUDP(t, s, a, false)
	}
	tp.wantICMP(t, "10.99.1.1", false)
	tp.wantICMP(t, "10.99.0.1", false) // the gateway too
	s.wantNone(t, servers...)
}

func TestAllowCIDR(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.0/24\nallow fd99:1::/64\n"))
	s := tp.serve(t)
	tp.wantTCP(t, "10.99.1.1", true)
	tp.wantTCP(t, "fd99:1::1", true)
	tp.wantTCP(t, "10.99.2.1", false)
	tp.wantTCP(t, "fd99:2::1", false)
	tp.wantUDP(t, s, "10.99.2.1", false)
	tp.wantUDP(t, s, "fd99:2::1", false)
	tp.wantUDP(t, s, "10.99.1.1", true)
	tp.wantUDP(t, s, "fd99:1::1", true)
	tp.wantICMP(t, "10.99.1.1", true)
	tp.wantICMP(t, "10.99.2.1", false)
	s.wantNone(t, "10.99.2.1", "fd99:2::1")
}

// TestPrefixOrder: the program agrees with Policy.Decide on longest
// prefix wins and deny wins at equal length.
func TestPrefixOrder(t *testing.T) {
	for _, text := range []string{
		"allow 10.99.0.0/16\ndeny 10.99.2.0/24\n",
		"deny 10.99.0.0/16\nallow 10.99.1.1\n",
		"allow 10.99.2.1\ndeny 10.99.2.1\nallow 10.99.1.1\n",
		"default allow\ndeny 10.99.2.0/24\ndeny fd99:2::/32\n",
		"allow ::/0\ndeny fd99:2::1\n",
	} {
		p := mustParse(t, text)
		tp := newTopo(t, p)
		tp.serve(t)
		for _, a := range servers {
			tp.wantTCP(t, a, p.Decide(netip.MustParseAddr(a)) == Allow)
		}
	}
}

func TestLiveUpdate(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.1\n"))
	tp.serve(t)
	tp.wantTCP(t, "10.99.1.1", true)
	tp.wantTCP(t, "10.99.2.1", false)
	must(t, tp.f.Set(mustParse(t, "allow 10.99.2.1\n")))
	tp.wantTCP(t, "10.99.1.1", false)
	tp.wantTCP(t, "10.99.2.1", true)
	must(t, tp.f.Set(mustParse(t, "default allow\ndeny 10.99.2.0/24\n")))
	tp.wantTCP(t, "10.99.1.1", true)
	tp.wantTCP(t, "fd99:1::1", true)
	tp.wantTCP(t, "10.99.2.1", false)
	must(t, tp.f.Set(&Policy{}))
	for _, a := range servers {
		tp.wantTCP(t, a, false)
	}
}

// TestClose: Close leaves no qdisc or filter on the link, and traffic
// flows unfiltered again.
func TestClose(t *testing.T) {
	tp := newTopo(t, &Policy{})
	tp.serve(t)
	idx := tp.h0.Attrs().Index
	flt, err := tp.hh.FilterList(tp.h0, netlink.HANDLE_MIN_INGRESS)
	must(t, err)
	if len(flt) != 1 {
		t.Fatalf("attached: %d ingress filters; want 1", len(flt))
	}
	tp.wantTCP(t, "10.99.2.1", false)
	f := tp.f
	must(t, f.Close())
	tp.f = nil
	// The maps are closed: the readers say so (EBADF), not a kernel error.
	if _, err := f.EndedFlows(time.Second, true); msg.Errno(err) != unix.EBADF || !strings.Contains(err.Error(), "filter closed") {
		t.Errorf("EndedFlows after Close: %v; want EBADF, filter closed", err)
	}
	if err := f.ReadEvents(func(Event) {}, nil); msg.Errno(err) != unix.EBADF || !strings.Contains(err.Error(), "filter closed") {
		t.Errorf("ReadEvents after Close: %v; want EBADF, filter closed", err)
	}
	qs, err := tp.hh.QdiscList(tp.h0)
	must(t, err)
	for _, q := range qs {
		if q.Type() == "clsact" || q.Attrs().Parent == netlink.HANDLE_CLSACT {
			t.Errorf("link %d: qdisc %v left after Close", idx, q)
		}
	}
	if flt, err := tp.hh.FilterList(tp.h0, netlink.HANDLE_MIN_INGRESS); err == nil && len(flt) != 0 {
		t.Errorf("link %d: filters %v left after Close", idx, flt)
	}
	if err := tp.dial("10.99.2.1"); err != nil {
		t.Errorf("tcp 10.99.2.1 after Close: %v; want unfiltered", err)
	}
}

// TestAttachTwice: a second filter on the same link is refused (its
// Close would remove the first one's qdisc).
func TestAttachTwice(t *testing.T) {
	tp := newTopo(t, &Policy{})
	f2, err := Load()
	must(t, err)
	defer f2.Close()
	if err := f2.Attach(tp.hh, tp.h0.Attrs().Index); err == nil {
		t.Fatal("second Attach on one link succeeded; want EEXIST")
	}
}

// TestSpecMatchesGo pins the C side's sizes to the Go constants: the
// counters map has one slot per Counter, each trie holds RulesMax rules
// per generation, flows' entries, keys and values are Go's.
func TestSpecMatchesGo(t *testing.T) {
	spec, err := loadEgress()
	must(t, err)
	if n := spec.Maps["counters"].MaxEntries; n != uint32(countMax) {
		t.Errorf("counters: %d entries in bpf/egress.c; Go has %d counters", n, countMax)
	}
	for _, m := range []string{"allow4", "deny4", "allow6", "deny6"} {
		if n := spec.Maps[m].MaxEntries; n != 2*RulesMax {
			t.Errorf("%s: %d entries; want 2*RulesMax %d (two generations)", m, n, 2*RulesMax)
		}
	}
	if fl := spec.Maps["flows"]; fl.MaxEntries != FlowsMax || fl.KeySize != flowKeySize || fl.ValueSize != flowValueSize {
		t.Errorf("flows: %d entries, key %d, value %d bytes; Go has %d, %d, %d", fl.MaxEntries, fl.KeySize, fl.ValueSize, FlowsMax, flowKeySize, flowValueSize)
	}
}

// TestSetFails: a Set the maps cannot hold (more rules than Parse lets
// through: the trie fills up) fails and leaves the old policy in force;
// the next Set clears the half-written generation and works.
func TestSetFails(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.1\n"))
	tp.serve(t)
	big := &Policy{}
	for i := range 2*RulesMax + 1 {
		a := netip.AddrFrom4([4]byte{10, 100 + byte(i>>16), byte(i >> 8), byte(i)})
		big.Rules = append(big.Rules, Rule{Allow, netip.PrefixFrom(a, 32)})
	}
	big.Rules = append(big.Rules, Rule{Allow, netip.MustParsePrefix("10.99.2.1/32")})
	if err := tp.f.Set(big); err == nil {
		t.Fatalf("Set(%d rules) succeeded; want the trie full", len(big.Rules))
	}
	tp.wantTCP(t, "10.99.1.1", true)
	tp.wantTCP(t, "10.99.2.1", false)
	must(t, tp.f.Set(mustParse(t, "allow 10.99.2.1\n")))
	tp.wantTCP(t, "10.99.1.1", false)
	tp.wantTCP(t, "10.99.2.1", true)
	var n int
	it := tp.f.objs.Allow4.Iterate()
	var k []byte
	var v uint32
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	if n != 2 { // 10.99.1.1 in one generation, 10.99.2.1 in the other
		t.Errorf("allow4 holds %d keys after the failed Set was cleared; want 2", n)
	}
}
