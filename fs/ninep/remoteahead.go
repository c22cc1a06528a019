package ninep

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"

	"sandfs/ctl/msg"
)

// Read-ahead of regular files opened read-only under a bind with
// BindOptions.ReadAhead: a read at the offset where the handle's last
// read ended (or at 0 for the first) is sequential and is served from a
// window that one round of concurrent reads to the server filled; the
// first window is one read (Options.ReadMax bytes, a small file costs
// nothing more), and so is one after the end of the file; later ones are
// readAheadChunks reads in flight. A read at
// any other offset drops the window and goes to the server as asked. A
// window that ended short (the end of the file when it was read) is not
// trusted past its end: the next read there asks the server again, so a
// file that grew shows its new bytes. An error that ended a window is
// returned by the read that needs the range that failed, not before.
// Bytes served from a window are as old as its fill.
const (
	readAheadChunks = 2         // reads in flight per window after the first
	readAheadChunk  = 128 << 10 // size of one read when Options.ReadMax is 0
	// readAheadBudget bounds the bytes held in windows per Remote (one
	// sandbox's agent); a handle that finds it spent reads as asked.
	readAheadBudget = 16 << 20
)

// readAhead is one handle's window.
type readAhead struct {
	mu     sync.Mutex // serializes the handle's reads; held across a fill
	next   int64      // where the last read ended: a read here is sequential
	filled bool       // a window was filled before: the next are readAheadChunks reads
	off    int64      // offset of data[0]
	data   []byte     // the window; nil: none
	end    error      // what the read after data met: nil (not read), io.EOF (short), or an error
	held   int64      // bytes reserved from the Remote's budget for data
	closed bool
}

// readAt serves a read of h through its window; a read that goes past
// a full window goes on into the next, so that only the end of the file
// makes a read short.
func (w *readAhead) readAt(ctx context.Context, h *remoteHandle, p []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, msg.Errorf(syscall.EBADF, "read %s: closed", h.n.path())
	}
	total := 0
	for {
		n, err := w.readOnce(ctx, h, p[total:], off+int64(total))
		total += n
		if err != nil && total > 0 {
			return total, nil // the read after it asks again
		}
		if err != nil || n == 0 || total == len(p) || !w.spent() {
			return total, err
		}
	}
}

// spent reports whether the last read took the window's last byte and
// the window ended full (more may follow).
func (w *readAhead) spent() bool {
	return w.data != nil && w.end == nil && w.next == w.off+int64(len(w.data))
}

// readOnce serves a read at off from the window, filling it if the read
// is sequential.
func (w *readAhead) readOnce(ctx context.Context, h *remoteHandle, p []byte, off int64) (int, error) {
	if n, err, ok := w.serve(p, off); ok {
		return n, err
	}
	sequential := off == w.next
	short := errors.Is(w.end, io.EOF) // at the end of the file: ask once
	w.drop(h.n.r)
	chunk := h.n.r.opt.ReadMax
	if chunk <= 0 {
		chunk = readAheadChunk
	}
	chunks := readAheadChunks
	if !w.filled || short {
		chunks = 1
	}
	size := int64(chunks * chunk)
	if !sequential || len(p) == 0 || !h.n.r.reserve(size) {
		n, err := h.readServer(ctx, p, off)
		w.next = off + int64(n)
		return n, err
	}
	w.filled = true
	w.held = size
	w.off = off
	w.data, w.end = h.fill(ctx, off, chunk, chunks)
	if len(w.data) == 0 {
		err := w.end
		w.drop(h.n.r)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return 0, err
	}
	n, err, _ := w.serve(p, off)
	return n, err
}

// serve answers a read at off from the window: its bytes, or the error
// that ended it for a read at its end; ok false if the window cannot.
func (w *readAhead) serve(p []byte, off int64) (n int, err error, ok bool) {
	if w.data == nil || off < w.off {
		return 0, nil, false
	}
	i := off - w.off
	switch {
	case i < int64(len(w.data)):
		n = copy(p, w.data[i:])
		w.next = off + int64(n)
		return n, nil, true
	case i == int64(len(w.data)) && w.end != nil && !errors.Is(w.end, io.EOF):
		err = w.end
		w.data, w.end = nil, nil // the next read asks again
		return 0, err, true
	}
	return 0, nil, false
}

// drop forgets the window and gives its bytes back to r's budget.
func (w *readAhead) drop(r *Remote) {
	w.data, w.end = nil, nil
	if w.held > 0 {
		r.unreserve(w.held)
		w.held = 0
	}
}

// close drops the window for good; later reads fail with EBADF.
func (w *readAhead) close(r *Remote) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drop(r)
	w.closed = true
}

// fill reads chunks reads of chunk bytes from off, all in flight at
// once, and returns the bytes up to the first short or failed one, and
// what ended them (io.EOF: a short read; nil: all full). A read ended
// by ctx is not kept as the window's end: the next read asks again.
func (h *remoteHandle) fill(ctx context.Context, off int64, chunk, chunks int) ([]byte, error) {
	buf := make([]byte, chunks*chunk)
	ns := make([]int, chunks)
	errs := make([]error, chunks)
	var wg sync.WaitGroup
	for i := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns[i], errs[i] = h.readServer(ctx, buf[i*chunk:(i+1)*chunk], off+int64(i*chunk))
		}()
	}
	wg.Wait()
	end := 0
	for i := range chunks {
		end += ns[i]
		if errs[i] != nil {
			if ctx.Err() != nil && end > 0 {
				return buf[:end], nil
			}
			return buf[:end], errs[i]
		}
		if ns[i] < chunk {
			return buf[:end], io.EOF
		}
	}
	return buf[:end], nil
}

// reserve takes n bytes of the read-ahead budget, if that many are left.
func (r *Remote) reserve(n int64) bool {
	if r.raHeld.Add(n) > readAheadBudget {
		r.raHeld.Add(-n)
		return false
	}
	return true
}

// unreserve gives n bytes back to the read-ahead budget.
func (r *Remote) unreserve(n int64) { r.raHeld.Add(-n) }
