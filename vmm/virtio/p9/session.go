package p9

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio"
)

const (
	eio      = syscall.EIO
	einval   = syscall.EINVAL
	eintr    = syscall.EINTR
	emsgsize = syscall.EMSGSIZE
)

// item is a request to send to the server.
type item struct {
	b       []byte    // the frame, or:
	direct  [][]byte  // the frame's checked header, then its body in guest memory (directMin)
	gen     uint64    // its session
	version bool      // a Tversion: dial the session first
	popped  time.Time // when the device took its chain
}

// take pops every available chain and accepts its request (between
// Begin and End). It returns false if the driver queued a bad chain (the
// device is then failed).
func (d *Device) take(q *virtio.Queue) ([]item, bool) {
	var out []item
	defer func() {
		d.mu.Lock()
		d.t.SignalUsed(q) // for the chains answered here
		d.mu.Unlock()
	}()
	for {
		for {
			c, ok, err := q.Pop()
			if err != nil {
				d.t.Fail(err)
				return nil, false
			}
			if !ok {
				break
			}
			d.stats.popped(time.Now())
			it, ok, err := d.accept(q, c)
			if err != nil {
				d.t.Fail(err)
				return nil, false
			}
			if ok {
				out = append(out, it)
			}
		}
		q.SetAvailEvent()
		if !q.Pending() {
			return out, true
		}
	}
}

// accept checks the request in c and registers it as pending, or
// answers it at once (false). An error is a chain outside guest memory.
func (d *Device) accept(q *virtio.Queue, c *virtio.Chain) (item, bool, error) {
	n := c.ReadableLen()
	if n < headerLen {
		// No tag to answer with: the chain goes back empty.
		slog.Warn("virtio-9p: request shorter than a header", "len", n)
		return d.refuse(q, c, nil)
	}
	var hb [headerLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return item{}, false, err
	}
	h := parseHeader(hb[:])
	if h.size < headerLen || h.size > d.cfg.MaxMsg || int64(h.size) > int64(n) {
		slog.Warn("virtio-9p: bad request size", "size", h.size, "readable", n, "max", d.cfg.MaxMsg)
		return d.refuse(q, c, rlerror(h.tag, einval))
	}
	var b []byte
	var direct [][]byte
	if h.size >= directMin {
		var err error
		if direct, err = gather(c, hb[:], int(h.size)); err != nil {
			return item{}, false, err
		}
	} else {
		b = make([]byte, h.size)
		copy(b, hb[:])
		if _, err := io.ReadFull(c, b[headerLen:]); err != nil {
			return item{}, false, err
		}
	}
	if d.answerFromLookup(q, c, h, b) || d.serveLocal(q, c, h, b, direct) {
		return item{}, false, nil
	}
	d.dropClunked(h, b)
	r := &request{c: c, oldTag: -1, popped: time.Now()}
	r.openFid, r.opens = openFid(h, b)
	if it, ok := d.clunkEarly(q, c, h, b, r.popped); ok {
		return it, true, nil
	}
	r.lookup, r.attrs = d.lookupWithAttrs(h, b)
	d.sawXattrCreate(h, b)
	if h.typ == tTflush {
		if old, ok := flushOldTag(b); ok {
			r.oldTag = int(old)
		}
	}
	if e := d.register(q, h, r); e != 0 {
		return d.refuse(q, c, rlerror(h.tag, e))
	}
	return item{b: b, direct: direct, gen: r.gen, version: h.typ == tTversion, popped: r.popped}, true, nil
}

// register makes r pending under h.tag in the current session (a
// Tversion starts a new one), or returns why not: no session (EIO), the
// tag already in flight (EINVAL).
func (d *Device) register(q *virtio.Queue, h header, r *request) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.typ == tTversion {
		d.newSessionLocked(q)
	} else if !d.open {
		return eio
	}
	if _, dup := d.pending[h.tag]; dup {
		slog.Warn("virtio-9p: tag already in flight", "tag", h.tag)
		return einval
	}
	r.gen = d.gen
	d.pending[h.tag] = r
	return 0
}

// refuse answers c at once with frame b (nil: the chain goes back empty).
func (d *Device) refuse(q *virtio.Queue, c *virtio.Chain, b []byte) (item, bool, error) {
	d.mu.Lock()
	d.writeLocked(q, c, b)
	d.mu.Unlock()
	return item{}, false, nil
}

// newSessionLocked starts a session for a Tversion: the previous one
// ends and its chains in flight are answered EIO. d.mu is held, and the
// pause gate.
func (d *Device) newSessionLocked(q *virtio.Queue) {
	d.gen++
	d.open, d.ordered, d.attrs = true, false, nil
	clear(d.xattrFids)
	d.dropFilesLocked()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	for tag, r := range d.pending {
		delete(d.pending, tag)
		if r.c != nil {
			d.writeLocked(q, r.c, rlerror(tag, eio))
		}
	}
}

// writeLocked writes frame b (nil: nothing) into c's writable part and
// returns c to the driver. A frame that does not fit becomes
// Rlerror(EMSGSIZE); if even that does not fit, c goes back empty. d.mu
// is held, and the pause gate.
func (d *Device) writeLocked(q *virtio.Queue, c *virtio.Chain, b []byte) {
	if d.t.Failed() {
		return
	}
	if len(b) > c.WritableSpace() {
		h := parseHeader(b)
		slog.Warn("virtio-9p: reply larger than the request's buffer", "size", len(b), "room", c.WritableSpace(), "tag", h.tag)
		b = rlerror(h.tag, emsgsize)
		if len(b) > c.WritableSpace() {
			b = nil
		}
	}
	if _, err := c.Write(b); err != nil {
		d.t.Fail(err)
		return
	}
	q.Push(c.Head, c.Written())
}

// send writes items to their session's socket, dialing it first for a
// Tversion. An item whose session has ended is left alone: the end
// answered it.
func (d *Device) send(items []item) {
	var bufs net.Buffers
	var conn net.Conn
	var first time.Time // when the first chain of bufs was taken
	flush := func() {
		if len(bufs) > 0 {
			n := len(bufs)
			w := time.Now()
			if _, err := bufs.WriteTo(conn); err != nil {
				conn.Close() // its reader ends the session
			} else {
				now := time.Now()
				d.stats.sent(n, now.Sub(first), now.Sub(w))
			}
		}
		bufs = nil
	}
	for _, it := range items {
		if it.version {
			flush()
			d.dial(it.gen)
		}
		d.mu.Lock()
		c, ok := d.conn, d.open && d.gen == it.gen
		d.mu.Unlock()
		if !ok || c == nil {
			continue
		}
		if c != conn {
			flush()
			conn = c
		}
		if len(bufs) == 0 {
			first = it.popped
		}
		if it.direct != nil {
			bufs = append(bufs, it.direct...)
		} else {
			bufs = append(bufs, it.b)
		}
	}
	flush()
}

// dial connects session gen to the server and starts its reader.
func (d *Device) dial(gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	c, err := d.cfg.Dial(ctx)
	cancel()
	var fds *rightsReader
	if uc, ok := c.(*net.UnixConn); ok && err == nil {
		// All before the Tversion that the caller sends next
		// (passed.go, clunk.go, passfile.go).
		first := append(append(append([]byte(nil), tpassreads...), torderclunks...), tpassfiles...)
		if _, werr := uc.Write(first); werr == nil {
			fds = newRightsReader(uc)
		}
	}
	d.mu.Lock()
	if d.gen != gen || !d.open {
		d.mu.Unlock()
		if c != nil {
			c.Close()
		}
		return
	}
	if err != nil {
		d.mu.Unlock()
		slog.Warn("virtio-9p: dial the server", "err", err)
		d.endSession(gen, msg.Errno(err))
		return
	}
	d.conn = c
	d.readers.Add(1)
	d.mu.Unlock()
	go d.read(c, gen, fds)
}

// read copies the replies of session gen from c into their chains until
// c ends (through fds, if the session asked for passed reads); then the
// session ends and what is left in flight gets EIO.
func (d *Device) read(c net.Conn, gen uint64, fds *rightsReader) {
	defer d.readers.Done()
	q := d.t.Queue(0)
	var src io.Reader = c
	if fds != nil {
		src = fds
		defer fds.close()
	}
	br := bufio.NewReaderSize(src, 64<<10)
	buf := make([]byte, 0, replyBufMax)
	for {
		if err := d.readOne(q, br, gen, &buf, fds); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && err != errClosing {
				slog.Warn("virtio-9p: session ends", "err", err)
			}
			break
		}
	}
	c.Close()
	d.endSession(gen, eio)
}

// readFrame reads one frame from the server, at most max bytes long.
func readFrame(br *bufio.Reader, max uint32) ([]byte, error) {
	h, err := peekHeader(br, max)
	if err != nil {
		return nil, err
	}
	return readBody(br, h, nil)
}

// readBody reads frame h, whose header is checked and still buffered in
// br, into buf (grown if it is too small) and returns it.
func readBody(br *bufio.Reader, h header, buf []byte) ([]byte, error) {
	if cap(buf) < int(h.size) {
		buf = make([]byte, h.size)
	}
	b := buf[:h.size]
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, err
	}
	return b, nil
}

// frameBuffered reports whether a whole next frame is already buffered:
// then the interrupt for this one waits for it.
func frameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < 4 {
		return false // (Peek would wait for more)
	}
	p, _ := br.Peek(4)
	return br.Buffered() >= int(binary.LittleEndian.Uint32(p))
}

// reply returns frame b of session gen to the chain waiting for its tag
// (between Begin and End), interrupting the driver if signal.
func (d *Device) reply(q *virtio.Queue, gen uint64, b []byte, signal bool, got time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.replyLocked(q, gen, b, signal, got)
}

// replyLocked is reply with d.mu held.
func (d *Device) replyLocked(q *virtio.Queue, gen uint64, b []byte, signal bool, got time.Time) {
	h := parseHeader(b)
	if signal {
		defer d.t.SignalUsed(q)
	}
	r, ok := d.pending[h.tag]
	if !ok || r.gen != gen {
		slog.Warn("virtio-9p: reply for no request", "tag", h.tag, "type", h.typ)
		return
	}
	delete(d.pending, h.tag)
	if r.c == nil {
		earlyReplied(h, b)
		return
	}
	if r.attrs && h.typ == tRwalkgetattr {
		b = d.attrsReplied(r, b)
	}
	if h.typ == tRflush && r.oldTag >= 0 {
		old := uint16(r.oldTag)
		if o, ok := d.pending[old]; ok && o.gen == gen {
			delete(d.pending, old)
			if o.c != nil { // (a guest may name a device tag: clunk.go)
				d.writeLocked(q, o.c, rlerror(old, eintr))
			}
		}
	}
	d.writeLocked(q, r.c, b)
	d.stats.replied(got.Sub(r.popped), time.Since(got), len(b))
}

// endSession ends session gen: its socket is closed and its chains in
// flight are answered with Rlerror(e).
func (d *Device) endSession(gen uint64, e syscall.Errno) {
	if !d.t.Begin() {
		return
	}
	defer d.t.End()
	q := d.t.Queue(0)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen == gen {
		d.open, d.ordered, d.attrs = false, false, nil
		if d.conn != nil {
			d.conn.Close()
			d.conn = nil
		}
		d.dropFilesLocked()
	}
	for tag, r := range d.pending {
		if r.gen == gen {
			delete(d.pending, tag)
			if r.c != nil {
				d.writeLocked(q, r.c, rlerror(tag, e))
			}
		}
	}
	d.t.SignalUsed(q)
}
