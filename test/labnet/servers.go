// Package labnet holds the network fixtures of the lab tests
// (test/guestlab, test/netlab): TCP servers in a namespace of the test's
// own behind the lab's, a DNS server for the daemon's resolver to use as
// its upstream, and a reader of a sandbox's net/audit stream.
package labnet

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/netpolicy/sbnet"
)

// Servers makes a network namespace (returned, closed at the test's
// end) joined to the lab's by a veth (netlab0 198.51.100.254/24 here,
// netlab1 there with addrs, each in 198.51.100.0/24) and listens on TCP
// port 8080 of each address there, each listener served by serve in a
// goroutine of its own (Hello: a connection gets "hello <address>\n").
// A guest's traffic reaches it through its sandbox's namespace and the
// lab's, NATed twice, and stays inside the lab.
func Servers(t testing.TB, addrs []string, serve func(net.Listener)) netns.NsHandle {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	addr := func(s string) *netlink.Addr {
		t.Helper()
		a, err := netlink.ParseAddr(s)
		must(err)
		return a
	}
	srv, err := sbnet.NewNS(func() error { return nil })
	must(err)
	t.Cleanup(func() { srv.Close() })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "netlab0"}, PeerName: "netlab1", PeerNamespace: netlink.NsFd(srv)}
	must(netlink.LinkAdd(veth))
	t.Cleanup(func() { netlink.LinkDel(veth) })
	host, err := netlink.LinkByName("netlab0")
	must(err)
	must(netlink.AddrAdd(host, addr("198.51.100.254/24")))
	must(netlink.LinkSetUp(host))
	sh, err := netlink.NewHandleAt(srv, unix.NETLINK_ROUTE)
	must(err)
	defer sh.Close()
	peer, err := sh.LinkByName("netlab1")
	must(err)
	for _, a := range addrs {
		must(sh.AddrAdd(peer, addr(a+"/24")))
	}
	must(sh.LinkSetUp(peer))
	// A socket stays in the namespace it was made in.
	var lns []net.Listener
	must(sbnet.InNS(srv, func() error {
		for _, a := range addrs {
			l, err := net.Listen("tcp", a+":8080")
			if err != nil {
				return err
			}
			lns = append(lns, l)
		}
		return nil
	}))
	for _, l := range lns {
		t.Cleanup(func() { l.Close() })
		go serve(l)
	}
	return srv
}

// Hello answers each connection to l with "hello <l's address>\n".
func Hello(l net.Listener) {
	a := ListenerIP(l)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "hello %s\n", a)
		c.Close()
	}
}

// HelloSink answers each connection to l as Hello does, then reads what
// the client sends until it half-closes and, if it sent anything,
// answers "got <bytes> <SHA-256 in hex>\n" before closing: a bulk send's
// far end. A client that sends nothing sees Hello's server.
func HelloSink(l net.Listener) {
	a := ListenerIP(l)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "hello %s\n", a)
			h := sha256.New()
			n, err := io.Copy(h, c)
			if err == nil && n > 0 {
				fmt.Fprintf(c, "got %d %x\n", n, h.Sum(nil))
			}
		}()
	}
}

// ListenerIP is the address l listens on, without its port.
func ListenerIP(l net.Listener) string {
	return strings.Split(l.Addr().String(), ":")[0]
}
