package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"
	"sync"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// waitFile serves /sandboxes/<id>/wait: the first read blocks until the
// sandbox's state changes after the open (or returns at once if it has
// ended), then returns the status line:
//
//	box1 paused template=base mem=256M cpus=1 world=- created=1764423000 timeout=0 deadline=0 pid=4242 limits=cgroup2
//
// then EOF. Reading again from offset 0 on the same open waits for the
// change after that one. An interrupted read (Ctrl-C, 9P flush or clunk)
// fails with EINTR and the next read waits for the same change.
type waitFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*waitFile)(nil)

// Stat implements fs.Node.Stat.
func (f *waitFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open: the handle remembers the version seen.
func (f *waitFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	if flags.Writable() {
		return nil, errAccess
	}
	h := &waitHandle{sb: f.sb, seen: f.sb.Version()}
	h.text.Src = h
	return h, nil
}

// waitHandle is one open of a wait file.
type waitHandle struct {
	sb   *ctl.Sandbox
	text sfs.TextHandle

	mu   sync.Mutex // protects seen
	seen uint64     // the version the next wait starts from
}

// Text implements fs.Source: it blocks until the next change.
func (h *waitHandle) Text(ctx context.Context, b *bytes.Buffer) error {
	h.mu.Lock()
	v := h.seen
	h.mu.Unlock()
	line, err := h.sb.WaitFrom(ctx, v)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.seen = h.sb.Version()
	h.mu.Unlock()
	b.WriteString(line)
	b.WriteByte('\n')
	return nil
}

// Read implements fs.Handle.Read.
func (h *waitHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements fs.Handle.Write.
func (h *waitHandle) Write(context.Context, []byte, int64) (int, error) { return 0, errBadFD }

// Close implements fs.Handle.Close.
func (h *waitHandle) Close() error { return nil }
