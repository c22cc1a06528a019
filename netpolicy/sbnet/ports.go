package sbnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// maxPorts bounds the guest ports one sandbox exposes at once.
const maxPorts = 64

// exposed is one guest TCP port exposed to the host: a listener of the
// daemon's on the host's loopback whose connections are joined to the
// guest's port, dialled from the sandbox's namespace (the guest sees
// them come from its gateway, which its filter always allows back).
type exposed struct {
	guest uint16
	owner uint32 // the uid that may connect (and root, and the daemon's)
	ln    net.Listener
}

// Expose makes guest TCP port p reachable on the host's loopback for
// uid owner, root and the daemon's uid (peer.go), and returns the
// address: prefer ("127.0.0.1:<port>", the address an earlier machine
// of the sandbox had) if it is free, else a port the kernel picks.
// Exposing a port again returns the same address.
func (n *Net) Expose(p uint16, owner uint32, prefer string) (string, error) {
	if p == 0 {
		return "", msg.Errorf(syscall.EINVAL, "expose: bad port 0")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.filter == nil {
		return "", msg.Errorf(syscall.ENODEV, "expose: the network is gone")
	}
	for _, e := range n.ports {
		if e.guest == p {
			return e.ln.Addr().String(), nil
		}
	}
	if len(n.ports) >= maxPorts {
		return "", msg.Errorf(syscall.E2BIG, "expose: %d ports exposed already, at most %d", len(n.ports), maxPorts)
	}
	// The listener's own handle on the namespace: n's may be closed
	// while its connections are still being dialled.
	fd, err := unix.FcntlInt(uintptr(n.ns), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return "", msg.Errorf(syscall.EIO, "expose: %v", err)
	}
	ns := netns.NsHandle(fd)
	var lc net.ListenConfig
	ln, err := net.Listener(nil), errors.New("no address preferred")
	if a, perr := netip.ParseAddrPort(prefer); perr == nil && a.Addr() == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		ln, err = lc.Listen(context.Background(), "tcp4", a.String())
	}
	if err != nil {
		ln, err = lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	}
	if err != nil {
		ns.Close()
		return "", msg.Errorf(syscall.EIO, "expose: %v", err)
	}
	n.ports = append(n.ports, &exposed{guest: p, owner: owner, ln: ln})
	go n.serveExposed(ln, ns, p, owner)
	return ln.Addr().String(), nil
}

// Unexpose closes guest port p's listener (its open connections stay).
func (n *Net) Unexpose(p uint16) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.ports, func(e *exposed) bool { return e.guest == p })
	if i < 0 {
		return msg.Errorf(syscall.ENOENT, "unexpose: port %d is not exposed", p)
	}
	n.ports[i].ln.Close()
	n.ports = slices.Delete(n.ports, i, i+1)
	return nil
}

// Ports is one line per exposed port, "<guest port> <host address>",
// in the order they were exposed.
func (n *Net) Ports() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s string
	for _, e := range n.ports {
		s += fmt.Sprintf("%d %s\n", e.guest, e.ln.Addr())
	}
	return s
}

// closePorts closes every listener. mu held.
func (n *Net) closePortsLocked() {
	for _, e := range n.ports {
		e.ln.Close()
	}
	n.ports = nil
}

// serveExposed joins each connection on ln whose peer owner may use
// (mayUse) to guest port p, dialled in namespace ns, which it closes once
// ln is closed and its connections are dialled. Another's connection is
// reset before anything is dialled, and logged.
func (n *Net) serveExposed(ln net.Listener, ns netns.NsHandle, p uint16, owner uint32) {
	guest := netip.AddrPortFrom(GuestAddr.Addr(), p).String()
	var dialing sync.WaitGroup
	defer func() { go func() { dialing.Wait(); ns.Close() }() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		dialing.Add(1)
		go func() {
			defer c.Close()
			if ok, err := mayUse(c, owner); !ok {
				dialing.Done()
				c.(*net.TCPConn).SetLinger(0) // a reset
				n.log.Warn("net: exposed port: connection refused", "net", n.Name, "port", p, "peer", c.RemoteAddr(), "owner", owner, "err", err)
				return
			}
			var g net.Conn
			err := InNS(ns, func() error {
				var err error
				g, err = net.DialTimeout("tcp4", guest, 10*time.Second)
				return err
			})
			dialing.Done()
			if err != nil {
				return
			}
			defer g.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(g, c)
				g.(*net.TCPConn).CloseWrite()
			}()
			io.Copy(c, g)
			c.(*net.TCPConn).CloseWrite()
			wg.Wait()
		}()
	}
}
