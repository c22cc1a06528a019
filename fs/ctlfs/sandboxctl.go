package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// sandboxCtlFile serves /sandboxes/<id>/ctl. A write is one verb
// (ctl.SandboxVerbs: pause, resume, kill, timeout...); a read gives the id
// and state:
//
//	box1 running
type sandboxCtlFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var (
	_ sfs.Source = (*sandboxCtlFile)(nil)
	_ sfs.Sink   = (*sandboxCtlFile)(nil)
)

// Stat implements fs.Node.Stat.
func (f *sandboxCtlFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Text implements fs.Source.
func (f *sandboxCtlFile) Text(ctx context.Context, b *bytes.Buffer) error {
	b.WriteString(f.sb.ID())
	b.WriteByte(' ')
	b.WriteString(string(f.sb.State()))
	b.WriteByte('\n')
	return nil
}

// Message implements fs.Sink; a failure's text is in the sandbox's err.
func (f *sandboxCtlFile) Message(ctx context.Context, m []byte) error {
	return f.sb.Ctl(ctx, m)
}
