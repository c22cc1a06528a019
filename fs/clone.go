package fs

import (
	"bytes"
	"context"
	iofs "io/fs"

	"sandfs/ctl"
)

// cloneFile serves /clone, Plan 9's clone file (devip.c Qclone): each
// open reserves a new sandbox (state new) and the open file becomes that
// sandbox's ctl. Reading gives its id:
//
//	k3x9q2
//
// writes are its ctl messages (template, mem, cpus, world, timeout,
// start...). Closing the last descriptor releases a sandbox never
// started; a started one lives on until kill and rm.
type cloneFile struct {
	t    *Tree
	mode iofs.FileMode
}

var _ Opener = (*cloneFile)(nil)

// Stat implements Node.Stat.
func (f *cloneFile) Stat(context.Context) (Attr, error) { return fileAttr(f.mode), nil }

// Open implements Opener.Open.
func (f *cloneFile) Open(ctx context.Context, flags OpenFlags) (Handle, error) {
	sb, err := f.t.plane.Clone(ctx)
	if err != nil {
		f.t.fail(err)
		return nil, err
	}
	h := &cloneHandle{t: f.t, sb: sb}
	h.text.src = h
	return h, nil
}

// cloneHandle is one open of /clone: it owns the sandbox it reserved.
type cloneHandle struct {
	t    *Tree
	sb   *ctl.Sandbox
	text textHandle
}

// Text implements Source: the sandbox id.
func (h *cloneHandle) Text(ctx context.Context, b *bytes.Buffer) error {
	b.WriteString(h.sb.ID())
	b.WriteByte('\n')
	return nil
}

// Read implements Handle.Read.
func (h *cloneHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements Handle.Write: one sandbox ctl message per write. A
// failure's text goes to /err and to the sandbox's err.
func (h *cloneHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	if err := h.sb.Ctl(ctx, p); err != nil {
		h.t.fail(err)
		return 0, err
	}
	h.text.restartAt(off + int64(len(p)))
	return len(p), nil
}

// Close implements Handle.Close.
func (h *cloneHandle) Close() error {
	h.sb.Release()
	return nil
}
