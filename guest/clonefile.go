package guest

import (
	"bytes"
	"context"
	"strconv"

	sfs "sandfs/fs"
)

// cloneFile serves procs/clone. Opening it allocates a new process slot
// and the open file becomes that slot's ctl: reads give the slot number,
// e.g. "3\n", writes are ctl messages. The slot lives on after the file
// is closed only if it was started (see the package doc).
type cloneFile struct{ s *Server }

var _ sfs.Opener = (*cloneFile)(nil)

// Stat implements sfs.Node.Stat.
func (f *cloneFile) Stat(context.Context) (sfs.Attr, error) { return synthAttr(0o666), nil }

// Open implements sfs.Opener.
func (f *cloneFile) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	h := &cloneHandle{p: f.s.procs.alloc()}
	h.text.Src = h
	return h, nil
}

// cloneHandle is an open procs/clone: the slot it allocated, which it
// holds open until Close.
type cloneHandle struct {
	p    *proc
	text sfs.TextHandle
}

// Text implements sfs.Source: the slot number.
func (h *cloneHandle) Text(_ context.Context, b *bytes.Buffer) error {
	b.WriteString(strconv.Itoa(h.p.n) + "\n")
	return nil
}

// Read implements sfs.Handle.Read.
func (h *cloneHandle) Read(ctx context.Context, b []byte, off int64) (int, error) {
	return h.text.Read(ctx, b, off)
}

// Write implements sfs.Handle.Write: one ctl message.
func (h *cloneHandle) Write(_ context.Context, b []byte, _ int64) (int, error) {
	if err := h.p.ctl(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close implements sfs.Handle.Close.
func (h *cloneHandle) Close() error {
	h.p.close()
	return nil
}
