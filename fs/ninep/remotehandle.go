package ninep

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
)

// remoteHandle is one open remote file with its own fid, on the shared
// session, or on a private one for a file whose reads block
// (Options.Private). If its session dies, the next request opens the
// file again (except a file whose open is state, Options.Once: that
// fails with EIO).
type remoteHandle struct {
	n       *remoteNode
	flags   sfs.OpenFlags
	private bool // own session, killed on interrupt
	once    bool // not opened again

	mu sync.Mutex // protects s, f
	s  *session   // the session f belongs to
	f  p9.File    // nil: closed, or dropped after an interrupt

	reading atomic.Int32 // reads in flight (a private session with one cannot be reused)

	ra *readAhead // nil: reads go to the server as asked (remoteahead.go)
}

var _ sfs.Handle = (*remoteHandle)(nil)

func (h *remoteHandle) openLocked(ctx context.Context) error {
	r := h.n.r
	var s *session
	var err error
	if h.private {
		s, err = r.private(ctx)
	} else {
		s, err = r.shared(ctx)
	}
	if err != nil {
		return err
	}
	f, err := call(ctx, r, s, "open "+h.n.path(), true, nil, func() (p9.File, error) {
		_, f, err := s.root.Walk(h.n.names())
		if err != nil {
			return nil, err
		}
		if _, _, err := f.Open(p9.OpenFlags(h.flags) & p9.OpenFlagsModeMask); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	})
	if err != nil {
		if h.private {
			s.kill(errors.New("open failed"))
		}
		return err
	}
	h.s, h.f = s, f
	return nil
}

// file returns the open fid, opening the file again if it was dropped.
func (h *remoteHandle) file(ctx context.Context) (*session, p9.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f != nil && !h.s.isDead() {
		return h.s, h.f, nil
	}
	if h.once {
		return nil, nil, msg.Errorf(syscall.EIO, "%s: the connection was lost; the open is gone with it", h.n.path())
	}
	if h.f != nil && h.private {
		h.s.kill(nil)
	}
	h.f = nil
	if err := h.openLocked(ctx); err != nil {
		return nil, nil, err
	}
	return h.s, h.f, nil
}

// drop forgets fid f after an interrupted request; a private session is
// closed, which ends the request in any server; a shared fid is clunked,
// which ends it in a sandfs server.
// Of several reads of f interrupted at once (a read-ahead window's),
// only the first clunks it.
func (h *remoteHandle) drop(s *session, f p9.File) {
	h.mu.Lock()
	current := h.f == f
	if current {
		h.f = nil
	}
	h.mu.Unlock()
	if h.private {
		s.kill(errors.New("interrupted"))
	} else if current {
		go f.Close()
	}
}

// Read implements fs.Handle.Read. A read that blocks ends when the server
// has data, the file ends (EOF) or ctx ends (EINTR; the fid or private
// session is dropped, so data the server had already taken for this read
// is lost, and the next read opens the file again). A handle that reads
// ahead serves sequential reads from its window (remoteahead.go).
func (h *remoteHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	if h.ra != nil {
		return h.ra.readAt(ctx, h, p, off)
	}
	return h.readServer(ctx, p, off)
}

// readServer reads from the server: one request of at most ReadMax
// bytes; the end of the file is 0 bytes and no error.
func (h *remoteHandle) readServer(ctx context.Context, p []byte, off int64) (int, error) {
	s, f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	size := len(p)
	if m := h.n.r.opt.ReadMax; m > 0 {
		size = min(size, m)
	}
	buf := make([]byte, size) // an abandoned read may still fill it
	h.reading.Add(1)
	n, err := call(ctx, h.n.r, s, "read "+h.n.path(), false, func() { h.drop(s, f) }, func() (int, error) {
		defer h.reading.Add(-1)
		return ReadP9(f, buf, off)
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	copy(p, buf[:n])
	return n, nil
}

// Write implements fs.Handle.Write. A refusal by the server goes through
// Options.Refused.
func (h *remoteHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	s, f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	bounded := h.n.r.opt.Messages != nil && h.n.r.opt.Messages(h.n.path())
	n, err := call(ctx, h.n.r, s, "write "+h.n.path(), bounded, func() { h.drop(s, f) }, func() (int, error) {
		return WriteP9(f, p, off)
	})
	if err != nil {
		return 0, h.n.r.refused(ctx, "write", h.n.path(), h, err)
	}
	return n, nil
}

// Close implements fs.Handle.Close. The clunk ends reads in flight in a
// sandfs server, so a read-ahead fill in progress ends before its window
// is given back.
func (h *remoteHandle) Close() error {
	if h.ra != nil {
		defer h.ra.close(h.n.r)
	}
	h.mu.Lock()
	s, f := h.s, h.f
	h.f = nil
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	r := h.n.r
	clunk := func() error { return r.do(context.Background(), s, "clunk "+h.n.path(), true, nil, f.Close) }
	if !h.private {
		return clunk()
	}
	// A read still blocked in the server ends only with its connection;
	// otherwise clunk and keep the session for reuse.
	if h.reading.Load() > 0 {
		s.kill(errors.New("closed"))
		return nil
	}
	if err := clunk(); err != nil {
		s.kill(err)
		return nil
	}
	r.release(s)
	return nil
}
