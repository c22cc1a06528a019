package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// sandboxCtlFile serves /sandboxes/<id>/ctl. A write is one verb
// (ctl.SandboxVerbs: pause, resume, kill, timeout, snapshot...); a read
// gives the id and state:
//
//	box1 running
//
// or, after a write on the same open that replied (snapshot: the
// snapshot's name), that reply. A failed write's text is in the
// sandbox's err.
type sandboxCtlFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*sandboxCtlFile)(nil)

func newSandboxCtlFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sandboxCtlFile{sb: sb, mode: mode}
}

// Stat implements fs.Node.Stat.
func (f *sandboxCtlFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open.
func (f *sandboxCtlFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	sb := f.sb
	return newReplyHandle(func(ctx context.Context, m []byte) (string, bool, error) {
		reply, err := sb.CtlReply(ctx, m)
		return reply, reply != "", err
	}, func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(sb.ID())
		b.WriteByte(' ')
		b.WriteString(string(sb.State()))
		b.WriteByte('\n')
		return nil
	}), nil
}
