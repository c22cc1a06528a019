package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"
)

// textHandle serves a Source with seq_file semantics (gVisor
// DynamicBytesFileDescriptionImpl): the text is generated whole at the
// first read, later reads are served from that buffer so that sequential
// reads see one consistent snapshot, and a read at offset 0 after the
// first one generates a fresh text (so `cat` on a kept-open fd, or a
// pread at 0, sees the current state).
//
// On files that are written and read through one open (/ctl, /clone),
// a write moves the start of the text to the offset where the write
// ended (restartAt), so that `exec 3<>ctl; echo new >&3; cat <&3` reads
// the reply from its beginning. Reads below that offset count from 0.
type textHandle struct {
	src Source // nil: not readable

	mu   sync.Mutex // protects the fields below
	buf  bytes.Buffer
	gen  bool  // buf holds a generated text
	base int64 // file offset of the text's first byte
}

// restartAt makes the text start again, fresh, at file offset off.
func (t *textHandle) restartAt(off int64) {
	t.mu.Lock()
	t.base, t.gen = off, false
	t.mu.Unlock()
}

// Read implements Handle.Read.
func (t *textHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	if t.src == nil {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if off >= t.base {
		off -= t.base
	}
	if !t.gen || off == 0 {
		t.buf.Reset()
		if err := t.src.Text(ctx, &t.buf); err != nil {
			t.gen = false
			return 0, err
		}
		t.gen = true
	}
	b := t.buf.Bytes()
	if off >= int64(len(b)) {
		return 0, nil
	}
	return copy(p, b[off:]), nil
}
