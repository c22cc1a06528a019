package sbnet

import (
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

	"sandfs/netpolicy"
	"sandfs/test/testenv"
)

// hostNS makes a namespace standing in for the host's, so the test's
// veths and NAT table never touch the real one.
func hostNS(t *testing.T) netns.NsHandle {
	t.Helper()
	testenv.NeedRoot(t)
	var ns netns.NsHandle
	err := func() error {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		ns, err = netns.New()
		if e := netns.Set(orig); e != nil {
			panic(e) // this thread is in the test's namespace: never unlock it
		}
		runtime.UnlockOSThread()
		orig.Close()
		return err
	}()
	testenv.HandOff(t, err == nil, "network namespaces")
	t.Cleanup(func() { ns.Close() })
	return ns
}

func newManager(t *testing.T) (*Manager, netns.NsHandle) {
	t.Helper()
	h := hostNS(t)
	m, err := NewManagerIn(h, nil)
	testenv.HandOff(t, err == nil, "sandbox network (tun, veth, nft): "+errString(err))
	t.Cleanup(m.Close)
	return m, h
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func mustParse(t *testing.T, s string) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSpareNetworks: with spares kept, a new network is a spare taken,
// named and given its policy (a spare filter is in it), and replaced in
// the background; a group member's network is made for it; closing the
// manager removes the spares (no host link is left once the networks
// in use are removed too).
func TestSpareNetworks(t *testing.T) {
	m, _ := newManager(t)
	if err := m.KeepSpares(1); err != nil {
		t.Fatal(err)
	}
	waitNets := func(ready int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if r, making, _ := m.nets.Stats(); r == ready && making == 0 {
				return
			}
			if time.Now().After(deadline) {
				r, making, _ := m.nets.Stats()
				t.Fatalf("%d spare networks ready, %d being made; want %d, 0", r, making, ready)
			}
		}
	}
	waitNets(1)
	if _, _, taken := m.spares.Stats(); taken != 1 {
		t.Errorf("%d spare filters taken; want 1 (the spare network's)", taken)
	}
	p := mustParse(t, "allow 192.0.2.0/24")
	a, err := m.Create("a.1", p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove()
	if _, _, taken := m.nets.Stats(); taken != 1 || a.Name != "a.1" || a.Policy() != p {
		t.Errorf("spare networks taken %d, name %q, policy %v; want 1, a.1, the one given", taken, a.Name, a.Policy())
	}
	if tap := a.TakeTap(); tap == nil {
		t.Error("a spare network without its tap")
	} else {
		tap.Close()
	}
	if c, err := a.Counters(); err != nil || len(c) == 0 {
		t.Errorf("the taken network's filter: %v, %v", c, err)
	}
	waitNets(1) // its replacement
	member, err := m.CreateMember("g.1", mustParse(t, ""), netip.MustParseAddr("100.126.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, taken := m.nets.Stats(); taken != 1 {
		t.Errorf("a group member took a spare network (%d taken)", taken)
	}
	member.Remove()
	a.Remove()
	m.nets.Close() // as Manager.Close does
	links, err := m.host.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, hostPrefix) {
			t.Errorf("host link %s left after Close", l.Attrs().Name)
		}
	}
}

// TestCreateRemove: a network has its namespace (tap0 with the gateway
// address and the filter, up0 with a default route), the host side of
// its veth on the first free slot, both NAT tables; Remove leaves none of
// it, and a second network takes the next slot while the first lives.
func TestCreateRemove(t *testing.T) {
	m, h := newManager(t)
	a, err := m.Create("a.1", mustParse(t, "allow 192.0.2.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create("b.1", mustParse(t, ""))
	if err != nil {
		a.Remove()
		t.Fatal(err)
	}
	if a.HostLink() != "sfn0" || b.HostLink() != "sfn1" {
		t.Errorf("host links %q %q, want sfn0 sfn1", a.HostLink(), b.HostLink())
	}
	if got := a.Transit().String(); got != "100.127.0.0" {
		t.Errorf("transit of a = %s, want 100.127.0.0", got)
	}
	for _, n := range []*Net{a, b} {
		tap, err := n.h.LinkByName(tapName)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		addrs, _ := n.h.AddrList(tap, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != GatewayAddr.String() {
			t.Errorf("%s: tap0 addresses %v, want %s", n.Name, addrs, GatewayAddr)
		}
		flt, err := n.h.FilterList(tap, netlink.HANDLE_MIN_INGRESS)
		if err != nil || len(flt) != 1 {
			t.Errorf("%s: ingress filters %v %v, want the policy's", n.Name, flt, err)
		}
		routes, _ := n.h.RouteList(nil, netlink.FAMILY_V4)
		def := false
		for _, r := range routes {
			def = def || r.Dst == nil || r.Dst.IP.IsUnspecified() && r.Gw.String() == n.Transit().String()
		}
		if !def {
			t.Errorf("%s: no default route via %s in %v", n.Name, n.Transit(), routes)
		}
		if !hasTable(t, n.ns) {
			t.Errorf("%s: no nft table %s in its namespace", n.Name, natTable)
		}
	}
	if !hasTable(t, h) {
		t.Errorf("no nft table %s in the host namespace", natTable)
	}
	tap := a.TakeTap()
	if tap == nil || a.TakeTap() != nil {
		t.Errorf("TakeTap: %v, then not nil", tap)
	}
	tap.Close()
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.host.LinkByName("sfn0"); err == nil {
		t.Error("sfn0 left after Remove")
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
}

func hasTable(t *testing.T, ns netns.NsHandle) bool {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == natTable {
			return true
		}
	}
	return false
}

// TestOpenAfterRestart: a daemon that exits leaves the network of a
// running machine as it is (Release); the next one finds it through the
// machine's tap descriptor (here this process's own) and takes its
// filter over with a new policy. Once the last descriptor of the tap
// closes (the VMM ended while no daemon ran), the kernel removes the
// namespace and with it both ends of the veth: nothing is left.
func TestOpenAfterRestart(t *testing.T) {
	m, _ := newManager(t)
	a, err := m.Create("a.1", mustParse(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	tap := a.TakeTap() // the "VMM"'s descriptor
	defer tap.Close()
	a.Release() // the daemon exits without removing anything
	o, err := m.Open("a.1", os.Getpid(), mustParse(t, "default allow"))
	if err != nil {
		t.Fatal(err)
	}
	if o.HostLink() != "sfn0" {
		t.Errorf("Open: host link %q, want sfn0", o.HostLink())
	}
	tl, _ := o.h.LinkByName(tapName)
	if flt, err := o.h.FilterList(tl, netlink.HANDLE_MIN_INGRESS); err != nil || len(flt) != 1 {
		t.Errorf("after Open: ingress filters %v %v, want one", flt, err)
	}
	if got := o.Policy().String(); got != "default allow\n" {
		t.Errorf("after Open: policy %q", got)
	}
	o.Release()
	tap.Close()
	// The namespace's teardown is the kernel's (a work queue): wait for
	// it, bounded by a count, not timed.
	for i := 0; ; i++ {
		if _, err := m.host.LinkByName("sfn0"); err != nil {
			break
		}
		if i == 200 {
			t.Fatal("sfn0 still there 200 polls after the tap's last descriptor closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestResolverAndLearn: the resolver listens on the gateway in the
// sandbox's namespace and refuses a name the policy does not allow
// (NXDOMAIN, from inside the namespace); an address learned for an
// allowed name joins the filter's rules, one for a name not allowed does
// not, and a policy without the name drops it.
func TestResolverAndLearn(t *testing.T) {
	m, _ := newManager(t)
	n, err := m.Create("r.1", mustParse(t, "allow *.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Remove()
	if err := n.StartResolver("127.0.0.1:9", nil); err != nil {
		t.Fatal(err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 5})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("evil.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	var h dnsmessage.Header
	err = InNS(n.ns, func() error {
		c, err := net.Dial("udp4", "169.254.68.5:53")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(q)
		buf := make([]byte, 512)
		k, err := c.Read(buf)
		if err != nil {
			return err
		}
		var p dnsmessage.Parser
		h, err = p.Start(buf[:k])
		return err
	})
	if err != nil || h.ID != 5 || h.RCode != dnsmessage.RCodeNameError {
		t.Errorf("query from the namespace: %+v, %v; want NXDOMAIN for id 5", h, err)
	}
	err = InNS(n.ns, func() error { // the same over TCP (RFC 7766 framing)
		c, err := net.Dial("tcp4", "169.254.68.5:53")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...))
		buf := make([]byte, 514)
		k, err := io.ReadAtLeast(c, buf, 2+12)
		if err != nil {
			return err
		}
		var p dnsmessage.Parser
		h, err = p.Start(buf[2:k])
		return err
	})
	if err != nil || h.ID != 5 || h.RCode != dnsmessage.RCodeNameError {
		t.Errorf("query over TCP from the namespace: %+v, %v; want NXDOMAIN for id 5", h, err)
	}
	a, b2 := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("203.0.113.9")
	n.learn("a.example.com", []netip.Addr{a}, time.Hour)
	n.learn("evil.test", []netip.Addr{b2}, time.Hour)
	e := effective(n.Policy(), n.learned)
	if e.Decide(a) != netpolicy.Allow || e.Decide(b2) != netpolicy.Deny || e.Decide(netip.MustParseAddr("169.254.68.5")) != netpolicy.Allow {
		t.Errorf("effective policy %v: want %s and the gateway allowed, %s not", e, a, b2)
	}
	if err := n.SetPolicy(mustParse(t, "allow other.test")); err != nil {
		t.Fatal(err)
	}
	if len(n.learned) != 0 {
		t.Errorf("learned after the name left the policy: %v", n.learned)
	}
}

// TestExpose: an exposed port joins connections on the host's loopback
// to the guest's address in the sandbox's namespace (here a listener on
// that address in the namespace itself stands in for the guest);
// unexpose closes the listener; Remove closes the rest.
func TestExpose(t *testing.T) {
	m, _ := newManager(t)
	n, err := m.Create("p.1", mustParse(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Remove()
	var guest net.Listener
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(InNS(n.ns, func() error {
		lo, err := n.h.LinkByName("lo")
		if err == nil {
			err = n.h.AddrAdd(lo, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(GuestAddr.Addr(), 32))})
		}
		if err == nil {
			guest, err = net.Listen("tcp4", GuestAddr.Addr().String()+":8000")
		}
		return err
	}))
	defer guest.Close()
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the guest\n"))
			c.Close()
		}
	}()
	addr, err := n.Expose(8000, 4321, "")
	must(err)
	if again, _ := n.Expose(8000, 4321, ""); again != addr {
		t.Errorf("Expose again = %s; want %s", again, addr)
	}
	if got := n.Ports(); got != "8000 "+addr+"\n" {
		t.Errorf("Ports() = %q", got)
	}
	c, err := net.Dial("tcp", addr)
	must(err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 64)
	k, _ := c.Read(b)
	c.Close()
	if string(b[:k]) != "hello from the guest\n" {
		t.Errorf("through the exposed port: %q", b[:k])
	}
	// The owner gets through; another uid's connection is reset before
	// anything is dialled.
	for _, c := range []struct {
		uid  uint32
		want string
	}{{4321, "hello from the guest\n"}, {4322, ""}} {
		conn, err := dialAs(c.uid, addr)
		if err != nil && c.want == "" {
			continue // the reset came before the dial's end
		}
		must(err)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		k, err := conn.Read(b)
		conn.Close()
		if string(b[:k]) != c.want || c.want == "" && err == nil {
			t.Errorf("uid %d through the exposed port: %q, %v; want %q", c.uid, b[:k], err, c.want)
		}
	}
	must(n.Unexpose(8000))
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the port still accepts after Unexpose")
	}
	if err := n.Unexpose(8000); err == nil {
		t.Error("Unexpose of a port not exposed succeeded")
	}
}
