package guest

import (
	"context"
	"strconv"
	"syscall"

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
	return &cloneHandle{p: f.s.procs.alloc()}, nil
}

// cloneHandle is an open procs/clone: the slot it allocated, which it
// holds open until Close.
type cloneHandle struct{ p *proc }

// Read implements sfs.Handle.Read.
func (h *cloneHandle) Read(_ context.Context, b []byte, off int64) (int, error) {
	s := strconv.Itoa(h.p.n) + "\n"
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= int64(len(s)) {
		return 0, nil
	}
	return copy(b, s[off:]), nil
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
