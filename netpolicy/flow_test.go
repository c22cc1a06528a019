package netpolicy

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// flowServe listens on addr:7001 in the host ns: each connection is read
// to its end, answered with reply bytes and closed.
func (tp *topo) flowServe(t *testing.T, addr string, reply int) {
	t.Helper()
	must(t, in(tp.host, func() error {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, "7001"))
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
				go func() {
					defer c.Close()
					io.Copy(io.Discard, c)
					c.Write(make([]byte, reply))
				}()
			}
		}()
		return nil
	}))
}

// flowDial connects from the guest to addr:7001 and returns the
// connection.
func (tp *topo) flowDial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	var c net.Conn
	must(t, in(tp.guest, func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addr, "7001"), safety)
		return err
	}))
	return c.(*net.TCPConn)
}

// waitFlows collects EndedFlows until n have come (or safety passed;
// n 0: for three times flowLinger, to see that none comes).
func (tp *topo) waitFlows(t *testing.T, n int, idle time.Duration) []Flow {
	t.Helper()
	var got []Flow
	wait := safety
	if n == 0 {
		wait, n = 3*flowLinger, 1
	}
	for deadline := time.Now().Add(wait); len(got) < n && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		fl, err := tp.f.EndedFlows(idle, false)
		must(t, err)
		got = append(got, fl...)
	}
	return got
}

// TestFlowBytes: an allowed connection's totals, both ways, are reported
// once when it has closed (a FIN each way), with its addresses; one the
// guest aborts (a RST) says so; a refused one makes none; and one still
// open is reported "open" only when all are asked for. Without the reply
// counter on the link's egress In stays 0 and the test fails.
func TestFlowBytes(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.1\nallow fd99:1::1\n"))
	tp.serve(t)
	const sent, reply = 50000, 30000
	for _, a := range []string{"10.99.1.1", "fd99:1::1"} {
		tp.flowServe(t, a, reply)
		c := tp.flowDial(t, a)
		gport := uint16(c.LocalAddr().(*net.TCPAddr).Port)
		c.Write(make([]byte, sent))
		c.CloseWrite()
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		if n != reply {
			t.Fatalf("%s: got %d bytes back; want %d", a, n, reply)
		}
		fl := tp.waitFlows(t, 1, time.Hour)
		if len(fl) != 1 {
			t.Fatalf("%s: ended flows %+v; want one", a, fl)
		}
		f := fl[0]
		// Every packet counts its headers too: at most ~100 bytes each,
		// and a 50000-byte send is at most ~60 packets of data and ACKs.
		if f.Dst != netip.MustParseAddr(a) || f.Port != 7001 || f.GuestPort != gport || f.End != "closed" ||
			f.Out < sent || f.Out > sent+100*100 || f.In < reply || f.In > reply+100*100 || f.Last.Before(f.Start) {
			t.Errorf("%s: flow %+v; want to %s:7001 from port %d, closed, out ~%d, in ~%d", a, f, a, gport, sent, reply)
		}
		if again := tp.waitFlows(t, 0, time.Hour); len(again) != 0 {
			t.Errorf("%s: reported again: %+v", a, again)
		}
	}

	// Aborted: the guest closes with SO_LINGER 0 (a RST).
	c := tp.flowDial(t, "10.99.1.1")
	c.Write([]byte("x"))
	c.SetLinger(0)
	c.Close()
	if fl := tp.waitFlows(t, 1, time.Hour); len(fl) != 1 || fl[0].End != "aborted" {
		t.Errorf("aborted connection: flows %+v; want one, aborted", fl)
	}

	// Refused (10.99.2.1 is denied): no flow; open: reported only with all.
	tp.wantTCP(t, "10.99.2.1", false)
	open := tp.flowDial(t, "10.99.1.1")
	defer open.Close()
	open.Write([]byte("hello"))
	if fl := tp.waitFlows(t, 0, time.Hour); len(fl) != 0 {
		t.Errorf("flows of a refused and an open connection: %+v; want none", fl)
	}
	fl, err := tp.f.EndedFlows(time.Hour, true)
	must(t, err)
	if len(fl) != 1 || fl[0].End != "open" || fl[0].Out == 0 {
		t.Errorf("EndedFlows(all): %+v; want the open connection", fl)
	}
	// Idle: the connection's next packets are not counted once reported.
	open.Write([]byte("more"))
	if fl, _ := tp.f.EndedFlows(0, false); len(fl) != 0 {
		t.Errorf("after its report the open connection has an entry again: %+v", fl)
	}
}
