package fs

import (
	"bytes"
	"context"
	"sync"
	"syscall"
)

// TextHandle serves a Source with seq_file semantics (gVisor
// DynamicBytesFileDescriptionImpl): the text is generated whole at the
// first read, later reads are served from that buffer so that sequential
// reads see one consistent snapshot, and a read at offset 0 after the
// first one generates a fresh text (so `cat` on a kept-open fd, or a
// pread at 0, sees the current state).
//
// On files that are written and read through one open (/ctl, /clone),
// a write moves the start of the text to the offset where the write
// ended (RestartAt), so that `exec 3<>ctl; echo new >&3; cat <&3` reads
// the reply from its beginning. Reads below that offset count from 0.
//
// It is the read half of a handle: a file kind with per-open state
// embeds one, sets Src (often to the handle itself) and forwards Read.
type TextHandle struct {
	Src Source // nil: not readable; set before the first Read

	mu   sync.Mutex // protects the fields below
	buf  bytes.Buffer
	gen  bool  // buf holds a generated text
	base int64 // file offset of the text's first byte
}

// RestartAt makes the text start again, fresh, at file offset off.
func (t *TextHandle) RestartAt(off int64) {
	t.mu.Lock()
	t.base, t.gen = off, false
	t.mu.Unlock()
}

// Read implements Handle.Read.
func (t *TextHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	if t.Src == nil {
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
		if err := t.Src.Text(ctx, &t.buf); err != nil {
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
