package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"
	"sync"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// ctlFile serves /ctl. A write is one global verb (ctl.GlobalVerbs):
//
//	new box1 mem=512M
//
// A read returns the reply to the last successful write on the same open
// ("box1\n" after new), or, before any, one usage line per verb:
//
//	new [name] [template=name] [mem=size] [cpus=n] [world=name] [timeout=dur]
//	kill <id>
//	rm <id>
type ctlFile struct {
	t    *Tree
	mode iofs.FileMode
}

var _ sfs.Opener = (*ctlFile)(nil)

// Stat implements fs.Node.Stat.
func (f *ctlFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open: the handle keeps the last reply.
func (f *ctlFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	h := &ctlHandle{t: f.t}
	h.text.Src = h
	return h, nil
}

// ctlHandle is one open of /ctl.
type ctlHandle struct {
	t    *Tree
	text sfs.TextHandle

	mu    sync.Mutex // protects reply
	reply string
	set   bool // a write has succeeded on this open
}

// Text implements fs.Source: the last reply, or the usage lines.
func (h *ctlHandle) Text(ctx context.Context, b *bytes.Buffer) error {
	h.mu.Lock()
	reply, set := h.reply, h.set
	h.mu.Unlock()
	if set {
		b.WriteString(reply)
		return nil
	}
	for _, v := range ctl.GlobalVerbs {
		b.WriteString(v.Usage)
		b.WriteByte('\n')
	}
	return nil
}

// Read implements fs.Handle.Read.
func (h *ctlHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements fs.Handle.Write: one message per write.
func (h *ctlHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	reply, err := h.t.plane.Ctl(ctx, p)
	if err != nil {
		h.t.fail(err)
		return 0, err
	}
	h.mu.Lock()
	h.reply, h.set = reply, true
	h.mu.Unlock()
	h.text.RestartAt(off + int64(len(p)))
	return len(p), nil
}

// Close implements fs.Handle.Close.
func (h *ctlHandle) Close() error { return nil }
