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
//	new [name] [template=name] [mem=size] [cpus=n] [world=name] [timeout=dur] [from=snap]
//	kill <id>
//	rm <id>
//	world <name> lower=<host path> [mode=overlay|readonly|unsafe-rw]
type ctlFile struct {
	t    *Tree
	mode iofs.FileMode
}

var _ sfs.Opener = (*ctlFile)(nil)

// Stat implements fs.Node.Stat.
func (f *ctlFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open: the handle keeps the last reply.
func (f *ctlFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	return newReplyHandle(func(ctx context.Context, m []byte) (string, bool, error) {
		reply, err := f.t.plane.Ctl(ctx, m)
		if err != nil {
			f.t.fail(err)
		}
		return reply, true, err
	}, func(ctx context.Context, b *bytes.Buffer) error {
		for _, v := range ctl.GlobalVerbs {
			b.WriteString(v.Usage)
			b.WriteByte('\n')
		}
		return nil
	}), nil
}

// replyHandle is one open of a ctl file whose writes may reply (/ctl,
// sandboxes/<id>/ctl): a read gives the reply of the last successful
// write on this open that has one, or, before any, idle's text.
type replyHandle struct {
	// write executes one message; replied says whether its reply is
	// what reads give from now on.
	write func(ctx context.Context, m []byte) (reply string, replied bool, err error)
	idle  func(ctx context.Context, b *bytes.Buffer) error
	text  sfs.TextHandle

	mu    sync.Mutex // protects reply and set
	reply string
	set   bool // a write has replied on this open
}

func newReplyHandle(write func(context.Context, []byte) (string, bool, error), idle func(context.Context, *bytes.Buffer) error) *replyHandle {
	h := &replyHandle{write: write, idle: idle}
	h.text.Src = h
	return h
}

// Text implements fs.Source: the last reply, or idle's text.
func (h *replyHandle) Text(ctx context.Context, b *bytes.Buffer) error {
	h.mu.Lock()
	reply, set := h.reply, h.set
	h.mu.Unlock()
	if set {
		b.WriteString(reply)
		return nil
	}
	return h.idle(ctx, b)
}

// Read implements fs.Handle.Read.
func (h *replyHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	return h.text.Read(ctx, p, off)
}

// Write implements fs.Handle.Write: one message per write.
func (h *replyHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	reply, replied, err := h.write(ctx, p)
	if err != nil {
		return 0, err
	}
	if replied {
		h.mu.Lock()
		h.reply, h.set = reply, true
		h.mu.Unlock()
	}
	h.text.RestartAt(off + int64(len(p)))
	return len(p), nil
}

// Close implements fs.Handle.Close.
func (h *replyHandle) Close() error { return nil }
