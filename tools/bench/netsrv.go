package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/netpolicy/sbnet"
)

// The flow's server: a namespace of the benchmark's own behind the
// lab's, joined to it by a veth, so a guest's packets cross its tap,
// the filter, both NATs and stay inside this machine:
//
//	guest ─tap0─ sandbox netns ─up0/sfnN─ this netns ─nbench0 198.51.100.254/24
//	                                                   │ veth
//	                                      srv netns ─nbench1 198.51.100.1/24
//	                                                    :5001 sink, :5002 accept+close
const (
	srvAddr  = "198.51.100.1"
	sinkPort = 5001
	connPort = 5002
)

// flowServer is the server namespace, its link and its listeners.
type flowServer struct {
	ns   netns.NsHandle
	veth *netlink.Veth
	lns  []net.Listener
}

// startFlowServer makes the namespace and serves in it: on sinkPort each
// connection is read to its end and answered with the byte count; on
// connPort each connection is closed at once.
func startFlowServer() (_ *flowServer, err error) {
	s := &flowServer{ns: netns.None()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.ns, err = sbnet.NewNS(func() error { return nil }); err != nil {
		return nil, err
	}
	s.veth = &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nbench0"}, PeerName: "nbench1", PeerNamespace: netlink.NsFd(s.ns)}
	if err := netlink.LinkAdd(s.veth); err != nil {
		s.veth = nil
		return nil, fmt.Errorf("veth: %w", err)
	}
	if err := upWith(&netlink.Handle{}, "nbench0", "198.51.100.254/24"); err != nil {
		return nil, err
	}
	sh, err := netlink.NewHandleAt(s.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer sh.Close()
	if err := upWith(sh, "nbench1", srvAddr+"/24"); err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	go serve(s.lns[0], func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		c.Write([]byte(strconv.FormatInt(n, 10) + "\n"))
	})
	go serve(s.lns[1], func(net.Conn) {})
	return s, nil
}

// upWith gives link name address a (CIDR) and sets it up, through h.
func upWith(h *netlink.Handle, name, a string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	addr, err := netlink.ParseAddr(a)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", a, name, err)
	}
	return h.LinkSetUp(l)
}

// listen makes the two listeners in s.ns (a socket stays in the
// namespace it was made in), on a thread that is never unlocked
// (sbnet.InNS).
func (s *flowServer) listen() error {
	return sbnet.InNS(s.ns, func() error {
		for _, p := range []int{sinkPort, connPort} {
			l, err := net.Listen("tcp", net.JoinHostPort(srvAddr, strconv.Itoa(p)))
			if err != nil {
				return err
			}
			s.lns = append(s.lns, l)
		}
		return nil
	})
}

// serve runs fn on each connection of l, then closes it.
func serve(l net.Listener, fn func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); fn(c) }()
	}
}

// close ends the listeners and removes the veth (its peer goes with it)
// and the namespace.
func (s *flowServer) close() error {
	var errs []error
	for _, l := range s.lns {
		errs = append(errs, l.Close())
	}
	if s.veth != nil {
		errs = append(errs, netlink.LinkDel(s.veth))
	}
	if s.ns.IsOpen() {
		errs = append(errs, s.ns.Close())
	}
	return errors.Join(errs...)
}
