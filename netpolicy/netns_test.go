package netpolicy

import (
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// topo is the tests' network: two namespaces of their own joined by a
// veth pair; the filter sits on the ingress of the host side (h0), as it
// will on a tap. The host namespace has the gateway addresses on h0 and
// the servers' addresses on lo:
//
//	guest ns                          host ns
//	g0 10.99.0.2/24  fd99::2/64  <->  h0 10.99.0.1/24  fd99::1/64   (filter: ingress)
//	                                  lo 10.99.1.1  10.99.2.1  fd99:1::1  fd99:2::1
type topo struct {
	guest, host netns.NsHandle
	hh          *netlink.Handle
	h0          netlink.Link
	f           *Filter
}

var servers = []string{"10.99.1.1", "10.99.2.1", "fd99:1::1", "fd99:2::1"}

// newTopo builds the topology with a loaded, attached filter holding p.
// A host that cannot make network namespaces or load and attach the
// program hands the test to the lab (test/lab-packages), whose kernel
// has BPF_SYSCALL, clsact and cls_bpf; there, a failure fails.
func newTopo(t testing.TB, p *Policy) *topo {
	t.Helper()
	testenv.NeedRoot(t)
	tp := &topo{}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	tp.guest, err = netns.New()
	if err == nil {
		tp.host, err = netns.New()
	}
	if e := netns.Set(orig); e != nil {
		panic(e) // this thread is in a test namespace: never unlock it
	}
	runtime.UnlockOSThread()
	orig.Close()
	testenv.HandOff(t, err == nil, "network namespaces: "+errText(err))
	t.Cleanup(func() { tp.guest.Close(); tp.host.Close() })

	tp.hh = handleAt(t, tp.host)
	gh := handleAt(t, tp.guest)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "h0"}, PeerName: "g0", PeerNamespace: netlink.NsFd(tp.guest)}
	must(t, tp.hh.LinkAdd(veth))
	tp.h0 = linkUp(t, tp.hh, "h0", "10.99.0.1/24", "fd99::1/64")
	lo := linkUp(t, tp.hh, "lo", "10.99.1.1/32", "10.99.2.1/32", "fd99:1::1/128", "fd99:2::1/128")
	_ = lo
	g0 := linkUp(t, gh, "g0", "10.99.0.2/24", "fd99::2/64")
	linkUp(t, gh, "lo")
	for _, gw := range []string{"10.99.0.1", "fd99::1"} {
		must(t, gh.RouteAdd(&netlink.Route{LinkIndex: g0.Attrs().Index, Gw: net.ParseIP(gw)}))
	}

	tp.f, err = Load()
	testenv.HandOff(t, err == nil, "loading the eBPF program: "+errText(err))
	t.Cleanup(func() {
		if tp.f != nil {
			tp.f.Close()
		}
	})
	must(t, tp.f.Set(p))
	err = tp.f.Attach(tp.hh, tp.h0.Attrs().Index)
	testenv.HandOff(t, err == nil, "attaching a tc BPF program (clsact): "+errText(err))
	return tp
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// netlinkAt is a rtnetlink handle in ns (only NETLINK_ROUTE: by default
// netlink also opens XFRM and netfilter sockets, which a kernel without
// them, the lab's, refuses with EPROTONOSUPPORT).
func netlinkAt(ns netns.NsHandle) (*netlink.Handle, error) {
	return netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
}

func handleAt(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlinkAt(ns)
	must(t, err)
	t.Cleanup(h.Close)
	return h
}

// linkUp sets link name up with addrs (no duplicate address detection).
func linkUp(t testing.TB, h *netlink.Handle, name string, addrs ...string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, err)
	for _, a := range addrs {
		pfx := netip.MustParsePrefix(a)
		ipn := &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())}
		must(t, h.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}))
	}
	must(t, h.LinkSetUp(l))
	return l
}

// in runs fn on a thread in ns; sockets fn opens stay in ns.
func in(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}
