package netpolicy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// TestEvents: the program's audit records, read from its ring buffer: an
// allowed TCP connection (its SYN), a denied one (reset) and a denied
// UDP datagram (drop), each with its protocol, destination, port and
// length; the allowed connection's other packets make none. (The
// guest namespace's own IPv6 chatter, denied too, is left out.)
func TestEvents(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.0/24\n"))
	s := tp.serve(t)
	evs := make(chan Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- tp.f.ReadEvents(func(e Event) {
			if e.Dst.Is4() { // not the guest stack's own IPv6 (MLD, ND to others)
				evs <- e
			}
		}, nil)
	}()
	tp.wantTCP(t, "10.99.1.1", true)
	tp.wantTCP(t, "10.99.2.1", false)
	tp.wantUDP(t, s, "10.99.2.1", false)
	want := []struct {
		verdict, proto, dst string
		port                uint16
	}{{"allow", "tcp", "10.99.1.1", 80}, {"reset", "tcp", "10.99.2.1", 80}, {"drop", "udp", "10.99.2.1", 53}}
	for _, w := range want {
		select {
		case e := <-evs:
			if e.Verdict != w.verdict || ProtoName(e.Proto) != w.proto || e.Dst.String() != w.dst || e.Port != w.port || e.Len == 0 {
				t.Errorf("event %+v; want %s %s %s:%d", e, w.verdict, w.proto, w.dst, w.port)
			}
			if d := time.Since(e.Time); d < 0 || d > time.Minute {
				t.Errorf("event time %v is %v from now", e.Time, d)
			}
		case <-time.After(safety):
			t.Fatalf("no event; want %s %s %s", w.verdict, w.proto, w.dst)
		}
	}
	// Nothing else came before a marker sent last (a denied datagram to
	// another address): events are written in order, so one for a late
	// packet of the allowed connection would come before it.
	tp.wantUDP(t, s, "10.99.3.1", false)
	select {
	case e := <-evs:
		if e.Verdict != "drop" || e.Dst.String() != "10.99.3.1" {
			t.Errorf("event %+v before the marker (drop udp 10.99.3.1:53); want none", e)
		}
	case <-time.After(safety):
		t.Fatal("no event for the marker datagram")
	}
	tp.f.Close()
	if err := <-done; err != nil {
		t.Errorf("ReadEvents after Close: %v", err)
	}
}

// TestEventsLimit: a guest flooding denied packets gets at most the
// burst plus the rate's worth of audit events, and every event the
// program did not send is counted: events read + suppressed + lost =
// packets audited (drops and resets), so nothing is left out silently.
func TestEventsLimit(t *testing.T) {
	tp := newTopo(t, mustParse(t, "allow 10.99.1.0/24\n")) // 10.99.2.1: denied
	var mu sync.Mutex
	var read uint64
	idled := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- tp.f.ReadEvents(func(e Event) {
			mu.Lock()
			read++
			mu.Unlock()
		}, func() {
			select {
			case idled <- struct{}{}:
			default:
			}
		})
	}()
	const flood = 4 * EventsBurst
	start := time.Now()
	must(t, in(tp.guest, func() error {
		c, err := net.Dial("udp", "10.99.2.1:53")
		if err != nil {
			return err
		}
		defer c.Close()
		for range flood {
			if _, err := c.Write([]byte("x")); err != nil {
				return err
			}
		}
		return nil
	}))
	// Every audited packet is accounted for once the reader has caught up.
	var c []uint64
	for end := time.Now().Add(safety); ; time.Sleep(time.Millisecond) {
		var err error
		c, err = tp.f.Counters()
		must(t, err)
		mu.Lock()
		n := read
		mu.Unlock()
		if n+c[CountSuppressed]+c[CountLost] == c[CountDrop]+c[CountReset] && c[CountDrop] >= flood {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("read %d events, counters %v: want read+suppressed+lost = drop+reset", n, c)
		}
	}
	elapsed := time.Since(start)
	mu.Lock()
	n := read
	mu.Unlock()
	if most := uint64(EventsBurst + EventsPerSec*elapsed.Seconds() + 1); n > most {
		t.Errorf("%d events for %d packets in %v; want at most %d (burst %d, %d/s)", n, flood, elapsed, most, EventsBurst, EventsPerSec)
	}
	if n < EventsBurst || c[CountSuppressed] == 0 {
		t.Errorf("%d events, %d suppressed; want the burst (%d) sent and the rest suppressed", n, c[CountSuppressed], EventsBurst)
	}
	select { // the reader calls idle once the flood is over
	case <-idled:
	case <-time.After(safety):
		t.Error("ReadEvents never called idle")
	}
	tp.f.Close()
	if err := <-done; err != nil {
		t.Errorf("ReadEvents after Close: %v", err)
	}
}
