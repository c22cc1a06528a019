package p9

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"sandfs/vmm/virtio"
)

// directMin is the frame size from which a request body is written to the
// socket straight from guest memory and a reply body read from the
// socket straight into it (a large write's or read's data), without a
// frame buffer in between: no copy and no garbage per request.
const directMin = 8 << 10

// errClosing: the transport is closing.
var errClosing = errors.New("transport closing")

// gather returns the first n bytes of the readable part of c as guest
// memory slices, after the header (the checked copy hb goes first: a
// guest rewriting its header after the check cannot change the frame's
// size on the socket; the body is the server's to check).
func gather(c *virtio.Chain, hb []byte, n int) ([][]byte, error) {
	rs, err := c.Buffers(false)
	if err != nil {
		return nil, err
	}
	_, rest := cut(rs, len(hb))
	body, _ := cut(rest, n-len(hb))
	if size(body) < n-len(hb) {
		return nil, fmt.Errorf("%w: readable part shorter than %d", virtio.ErrBadChain, n)
	}
	return append([][]byte{append([]byte(nil), hb...)}, body...), nil
}

// readOne reads the next frame of session gen from br and returns it to
// its chain; an Rreadfd, on a session that asked for passed reads (fds),
// is read by readPassed. A large reply (directMin) whose chain has room goes from
// the socket straight into guest memory, under the pause gate (the
// server writes a frame at once, so a pause waits for one frame at
// most); others go through buf, the session's reply buffer (the frame is
// copied into its chain before readOne returns, so buf is reused).
func (d *Device) readOne(q *virtio.Queue, br *bufio.Reader, gen uint64, buf *[]byte, fds *rightsReader) error {
	h, err := peekHeader(br, d.cfg.MaxMsg)
	if err != nil {
		return err
	}
	if h.typ == tRreadfd && fds != nil {
		return d.readPassed(q, br, gen, h, fds)
	}
	if h.typ == tRlopenfd && fds != nil {
		return d.readOpenFD(q, br, gen, h, fds)
	}
	if h.typ == tRorderclunks && h.size == headerLen {
		br.Discard(headerLen)
		d.orderedClunks(gen)
		return nil
	}
	large := h.size >= directMin && h.typ != tRflush
	if large {
		if !d.t.Begin() {
			return errClosing
		}
		defer d.t.End()
		if p := d.takePending(h.tag, gen, int(h.size)); p != nil {
			return d.readDirect(q, br, p, h)
		}
	}
	b, err := readBody(br, h, *buf)
	if err != nil {
		return err
	}
	if len(b) <= replyBufMax {
		*buf = b
	}
	got := time.Now()
	if !large {
		if !d.t.Begin() {
			return errClosing
		}
		defer d.t.End()
	}
	d.reply(q, gen, b, !frameBuffered(br), got)
	return nil
}

// takePending takes the request of session gen waiting under tag out of
// pending, if its chain has room for room bytes; else nil (and it stays).
func (d *Device) takePending(tag uint16, gen uint64, room int) *request {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[tag]
	if !ok || p.gen != gen || p.c == nil || p.attrs || room > p.c.WritableSpace() {
		return nil
	}
	delete(d.pending, tag)
	return p
}

// replyBufMax bounds the reply buffer a session keeps: a larger frame
// that could not go straight into its chain (rare) gets a buffer of its
// own.
const replyBufMax = directMin

// readDirect reads the frame h from br into r's chain (taken out of
// pending by the caller) and pushes it. Between Begin and End.
func (d *Device) readDirect(q *virtio.Queue, br *bufio.Reader, r *request, h header) error {
	got := time.Now()
	ws, err := r.c.Buffers(true)
	if err == nil {
		left := int(h.size)
		for _, w := range ws {
			k := min(len(w), left)
			if _, err = io.ReadFull(br, w[:k]); err != nil {
				break
			}
			if left -= k; left == 0 {
				break
			}
		}
	} else {
		d.t.Fail(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.writeLocked(q, r.c, rlerror(h.tag, eio))
		d.t.SignalUsed(q)
		return err
	}
	if !d.t.Failed() {
		q.Push(r.c.Head, h.size)
	}
	d.stats.replied(got.Sub(r.popped), time.Since(got), int(h.size))
	d.stats.directReplies.Add(1)
	if !frameBuffered(br) {
		d.t.SignalUsed(q)
	}
	return nil
}
