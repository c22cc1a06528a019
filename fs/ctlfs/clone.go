package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"

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

var _ sfs.Opener = (*cloneFile)(nil)

// Stat implements fs.Node.Stat.
func (f *cloneFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open.
func (f *cloneFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	sb, err := f.t.plane.Clone(ctx)
	if err != nil {
		f.t.fail(err)
		return nil, err
	}
	h := &cloneHandle{t: f.t, sb: sb}
	h.text.Src = h
	return h, nil
}

// cloneHandle is one open of /clone: it owns the sandbox it reserved.
type cloneHandle struct {
	t    *Tree
	sb   *ctl.Sandbox
	text sfs.TextHandle
}

// Text implements fs.Source: the sandbox id.
func (h *cloneHandle) Text(ctx context.Context, b *bytes.Buffer) error {
	b.WriteString(h.sb.ID())
	b.WriteByte('\n')
	return nil
}

// Read implements fs.Handle.Read.
func (h *cloneHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements fs.Handle.Write: one sandbox ctl message per write. A
// failure's text goes to /err and to the sandbox's err.
func (h *cloneHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	if err := h.sb.Ctl(ctx, p); err != nil {
		h.t.fail(err)
		return 0, err
	}
	h.text.RestartAt(off + int64(len(p)))
	return len(p), nil
}

// Close implements fs.Handle.Close.
func (h *cloneHandle) Close() error {
	h.sb.Release()
	return nil
}
