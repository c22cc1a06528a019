package netpolicy

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// safety bounds a wait that should end at once; no result depends on it.
const safety = 10 * time.Second

// udpSink counts the datagrams each server address received.
type udpSink struct {
	mu  sync.Mutex
	got map[string]int // guarded by mu
	in  chan string
}

// serve starts a TCP listener (port 80, accepts and closes) and a UDP
// socket (port 53, counts) on every server address, in the host ns.
func (tp *topo) serve(t testing.TB) *udpSink {
	t.Helper()
	s := &udpSink{got: map[string]int{}, in: make(chan string, 64)}
	must(t, in(tp.host, func() error {
		for _, a := range servers {
			l, err := net.Listen("tcp", net.JoinHostPort(a, "80"))
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			u, err := net.ListenPacket("udp", net.JoinHostPort(a, "53"))
			if err != nil {
				return err
			}
			t.Cleanup(func() { u.Close() })
			go func(a string) {
				b := make([]byte, 64)
				for {
					if _, _, err := u.ReadFrom(b); err != nil {
						return
					}
					s.mu.Lock()
					s.got[a]++
					s.mu.Unlock()
					s.in <- a
				}
			}(a)
		}
		return nil
	}))
	return s
}

func (s *udpSink) count(a string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[a]
}

// dial connects from the guest to addr:80.
func (tp *topo) dial(addr string) error {
	return in(tp.guest, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "80"), safety)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// wantTCP checks that a connection to addr opens (allow) or is refused
// at once by the program's reset (deny).
func (tp *topo) wantTCP(t *testing.T, addr string, allow bool) {
	t.Helper()
	before := tp.counter(t, CountReset)
	err := tp.dial(addr)
	switch {
	case allow && err != nil:
		t.Errorf("tcp %s: %v; want allowed", addr, err)
	case !allow && !errors.Is(err, syscall.ECONNREFUSED):
		t.Errorf("tcp %s: %v; want ECONNREFUSED (reset by the program)", addr, err)
	case !allow && tp.counter(t, CountReset) <= before:
		t.Errorf("tcp %s: refused, but the reset counter stayed at %d", addr, before)
	}
}

func (tp *topo) counter(t *testing.T, c Counter) uint64 {
	t.Helper()
	n, err := tp.f.Counters()
	must(t, err)
	return n[c]
}

// waitDrop waits until the drop counter passes before (the program saw
// a denied packet); it does not decide the result, only when to look.
func (tp *topo) waitDrop(t *testing.T, before uint64) {
	t.Helper()
	for end := time.Now().Add(safety); tp.counter(t, CountDrop) <= before; {
		if time.Now().After(end) {
			t.Fatalf("drop counter stayed at %d", before)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantUDP sends one datagram from the guest to addr:53; allowed, the
// server gets it; denied, the program drops it (the server's count is
// checked again at the end by wantNoUDP).
func (tp *topo) wantUDP(t *testing.T, s *udpSink, addr string, allow bool) {
	t.Helper()
	before := tp.counter(t, CountDrop)
	must(t, in(tp.guest, func() error {
		c, err := net.Dial("udp", net.JoinHostPort(addr, "53"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}))
	if !allow {
		tp.waitDrop(t, before)
		return
	}
	select {
	case a := <-s.in:
		if a != addr {
			t.Errorf("udp %s: arrived at %s", addr, a)
		}
	case <-time.After(safety):
		t.Errorf("udp %s: no datagram; want allowed", addr)
	}
}

// wantICMP pings addr (IPv4) from the guest once.
func (tp *topo) wantICMP(t *testing.T, addr string, allow bool) {
	t.Helper()
	before := tp.counter(t, CountDrop)
	var got bool
	must(t, in(tp.guest, func() error {
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x5af, Seq: 1, Data: []byte("sandfs")}}
		b, err := m.Marshal(nil)
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(addr)}); err != nil {
			return err
		}
		isReply := func(b []byte, from string) bool {
			r, err := icmp.ParseMessage(1, b)
			return err == nil && r.Type == ipv4.ICMPTypeEchoReply && from == addr
		}
		if !allow {
			tp.waitDrop(t, before)
			for _, q := range drain(t, c, false) { // look once: is a reply queued?
				got = got || isReply(q.data, q.from)
			}
			return nil
		}
		c.SetReadDeadline(time.Now().Add(safety))
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if isReply(buf[:n], from.String()) {
				got = true
				return nil
			}
		}
	}))
	if got != allow {
		t.Errorf("icmp %s: reply %v; want %v", addr, got, allow)
	}
}

// wantNoUDP checks, after the allowed traffic that followed, that no
// denied datagram reached its server.
func (s *udpSink) wantNone(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if n := s.count(a); n != 0 {
			t.Errorf("udp %s: %d datagrams arrived; want 0 (denied)", a, n)
		}
	}
}

// queued is one datagram drain read.
type queued struct {
	data []byte
	from string
}

// drain returns the datagrams queued on c now, without waiting (a read
// deadline in the past would not even try: package net checks it first).
func drain(t *testing.T, c *icmp.PacketConn, v6 bool) []queued {
	t.Helper()
	var pc net.PacketConn
	if v6 {
		pc = c.IPv6PacketConn().PacketConn
	} else {
		pc = c.IPv4PacketConn().PacketConn
	}
	sc, ok := pc.(syscall.Conn)
	if !ok {
		t.Fatal("drain: no raw socket")
	}
	rc, err := sc.SyscallConn()
	must(t, err)
	var out []queued
	must(t, rc.Read(func(fd uintptr) bool {
		for {
			b := make([]byte, 2048)
			n, from, err := unix.Recvfrom(int(fd), b, unix.MSG_DONTWAIT)
			if err != nil {
				return true
			}
			q := queued{data: b[:n]}
			switch a := from.(type) {
			case *unix.SockaddrInet4:
				q.from = netip.AddrFrom4(a.Addr).String()
			case *unix.SockaddrInet6:
				q.from = netip.AddrFrom16(a.Addr).String()
			}
			out = append(out, q)
		}
	}))
	return out
}
