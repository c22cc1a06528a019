package sbnet

import (
	"net"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// dialAs connects to addr from a socket of uid's (made on a thread of
// its own with that fsuid, which owns a socket; the thread ends with
// its goroutine).
func dialAs(uid uint32, addr string) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	done := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		unix.Setfsuid(int(uid))
		c, err := net.Dial("tcp4", addr)
		done <- res{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// TestPeerOwner: the owner of a connection's other end, found by
// sock_diag: root's, another uid's, and one closed before the lookup
// (a TIME_WAIT mini-socket, which says uid 0): unknown, so refused.
func TestPeerOwner(t *testing.T) {
	testenv.NeedRoot(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct {
		name   string
		uid    uint32
		closed bool
		mayUse bool // for owner 4321
	}{
		{"root", 0, false, true},
		{"owner", 4321, false, true},
		{"other", 4322, false, false},
		{"other, closed", 4322, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := dialAs(c.uid, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if c.closed {
				cl.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				cl.Close()
			} else {
				defer cl.Close()
			}
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			if c.closed {
				// Until the client's FIN is here, it might still be open.
				sc.Read(make([]byte, 64))
				sc.Read(make([]byte, 64))
			}
			peer, local := sc.RemoteAddr().(*net.TCPAddr), sc.LocalAddr().(*net.TCPAddr)
			for _, l := range []struct {
				name string
				fn   func(peer, local *net.TCPAddr) (uint32, bool, error)
			}{{"sock_diag", peerDiag}, {"/proc/net/tcp", peerProc}} {
				uid, ok, err := l.fn(peer, local)
				if l.name == "sock_diag" && err == nil && !ok && !c.closed {
					t.Logf("sock_diag: not found (a kernel without INET_TCP_DIAG?)")
					continue
				}
				if err != nil || ok == c.closed || ok && uid != c.uid {
					t.Errorf("%s: owner %d, %v, %v; want %d, %v", l.name, uid, ok, err, c.uid, !c.closed)
				}
			}
			if got, err := mayUse(sc, 4321); got != c.mayUse || err != nil {
				t.Errorf("mayUse(owner 4321) = %v, %v; want %v", got, err, c.mayUse)
			}
		})
	}
}

// BenchmarkPeerCheck: a loopback connection accepted and closed, with
// and without the owner's check (docs/network.md, exposed ports).
func BenchmarkPeerCheck(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	for _, l := range []struct {
		name  string
		check func(peer, local *net.TCPAddr) (uint32, bool, error)
	}{{"accept", nil}, {"accept+sock_diag", peerDiag}, {"accept+proc", peerProc}} {
		check := l.check
		b.Run(l.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cl, err := net.Dial("tcp4", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				sc, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				if check != nil {
					if _, ok, err := check(sc.RemoteAddr().(*net.TCPAddr), sc.LocalAddr().(*net.TCPAddr)); !ok {
						b.Fatal("not found", err)
					}
				}
				sc.Close()
				cl.Close()
			}
		})
	}
}

// TestPeerDiagExact: the lookup matches all four addresses, not only the
// ports: with a socket 127.0.0.4:P -> 127.0.0.2:L open, the same ports
// between other addresses are not found, and each of two sockets with
// the same ports is found by its own addresses only. (A dump request,
// NLM_F_DUMP, as vishvananda/netlink v1.3.1's SocketGet sends, makes the
// kernel match the ports alone: it returned the other socket for each of
// these, and one for addresses with no socket at all.)
func TestPeerDiagExact(t *testing.T) {
	testenv.NeedRoot(t)
	var conns []net.Conn
	for _, p := range [][2]string{{"127.0.0.3", "127.0.0.1"}, {"127.0.0.4", "127.0.0.2"}} {
		ln, err := net.Listen("tcp4", p[1]+":47101")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(p[0]), Port: 47102}}
		c, err := d.Dial("tcp4", p[1]+":47101")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	if _, found, err := peerDiag(conns[0].LocalAddr().(*net.TCPAddr), conns[0].RemoteAddr().(*net.TCPAddr)); err != nil || !found {
		t.Skipf("sock_diag finds no TCP socket here (found %v, %v): the /proc path decides", found, err)
	}
	tcp := func(a string, port int) *net.TCPAddr { return &net.TCPAddr{IP: net.ParseIP(a).To4(), Port: port} }
	for _, c := range []struct {
		peer, local *net.TCPAddr
		want        bool
	}{
		{tcp("127.0.0.3", 47102), tcp("127.0.0.1", 47101), true},
		{tcp("127.0.0.4", 47102), tcp("127.0.0.2", 47101), true},
		{tcp("127.0.0.3", 47102), tcp("127.0.0.2", 47101), false},
		{tcp("127.0.0.9", 47102), tcp("127.0.0.9", 47101), false},
	} {
		if _, found, err := peerDiag(c.peer, c.local); err != nil || found != c.want {
			t.Errorf("peerDiag(%v, %v) = found %v, %v; want %v", c.peer, c.local, found, err, c.want)
		}
	}
}
