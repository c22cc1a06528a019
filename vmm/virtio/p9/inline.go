package p9

import (
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guest's notify reaches Notify on the vCPU thread that took its
// exit. Handing every request to the device goroutine cost a wake-up
// per request (a kick, then the Go scheduler finding the goroutine a
// thread: 4.4 ms of a 50 ms request in the loaded lab, test/guestlab
// BenchmarkWorldHops), so the vCPU thread sends small requests itself
// (sendNow) when it can do so without blocking: nothing else queued, a
// session already open, and the socket taking the whole write at once.
// Everything else (a Tversion's dial, a large request written from guest
// memory, a write the socket took only in part) is left to the device
// goroutine, in order: pops and writes happen under sendMu, and the
// goroutine writes what sendNow left (later) before it pops again.

// sendNow pops the available chains and writes their requests from the
// calling thread without blocking. It returns false if it left work for
// the device goroutine (or could not start: the goroutine holds
// sendMu), which must then be kicked.
func (d *Device) sendNow() bool {
	if !d.sendMu.TryLock() {
		return false
	}
	defer d.sendMu.Unlock()
	if d.later.pending() {
		return false
	}
	if !d.t.Begin() {
		return true // closing
	}
	items, ok := d.take(d.t.Queue(0))
	d.t.End()
	if !ok || len(items) == 0 {
		return true
	}
	conn, bufs := d.inlineBufs(items)
	if conn == nil {
		d.later.items = items
		return false
	}
	w := time.Now()
	n, err := writeNow(conn, bufs)
	now := time.Now()
	if err != nil {
		conn.Close() // its reader ends the session
		return true
	}
	d.stats.sent(len(items), now.Sub(items[0].popped), now.Sub(w))
	d.stats.inline.Add(uint64(len(items)))
	if n < total(bufs) {
		d.later.conn, d.later.rest = conn, skip(bufs, n)
		return false
	}
	return true
}

// inlineBufs returns the connection and the frames of items if all are
// small requests of the open session (nil otherwise).
func (d *Device) inlineBufs(items []item) (net.Conn, net.Buffers) {
	d.mu.Lock()
	conn, gen, open := d.conn, d.gen, d.open
	d.mu.Unlock()
	if conn == nil || !open {
		return nil, nil
	}
	bufs := make(net.Buffers, 0, len(items))
	for _, it := range items {
		if it.version || it.direct != nil || it.gen != gen {
			return nil, nil
		}
		bufs = append(bufs, it.b)
	}
	return conn, bufs
}

// writeNow writes bufs to conn with one writev that does not wait for
// room: it returns how much the socket took (0 on EAGAIN).
func writeNow(conn net.Conn, bufs net.Buffers) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		n, werr = unix.Writev(int(fd), bufs)
		return true // never wait: what is left goes to the device goroutine
	})
	if errors.Is(werr, unix.EAGAIN) {
		return 0, nil
	}
	if werr != nil {
		return 0, werr
	}
	return n, err
}

// later is what sendNow left for the device goroutine. Guarded by
// Device.sendMu.
type later struct {
	conn  net.Conn    // rest's connection
	rest  net.Buffers // the unwritten end of a write the socket took in part
	items []item      // popped requests not sent
}

func (l *later) pending() bool { return len(l.rest) > 0 || len(l.items) > 0 }

// flushLater writes what sendNow left, in order. sendMu held.
func (d *Device) flushLater() {
	if len(d.later.rest) > 0 {
		if _, err := d.later.rest.WriteTo(d.later.conn); err != nil {
			d.later.conn.Close()
		}
	}
	items := d.later.items
	d.later = later{}
	if len(items) > 0 {
		d.send(items)
	}
}

// total is the length of bufs.
func total(bufs net.Buffers) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// skip returns bufs without their first n bytes.
func skip(bufs net.Buffers, n int) net.Buffers {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}
