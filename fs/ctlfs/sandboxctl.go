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
//
// A failed write's text is in the sandbox's err.
func sandboxCtlFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.CtlFile{
		TextFile: sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
			b.WriteString(sb.ID())
			b.WriteByte(' ')
			b.WriteString(string(sb.State()))
			b.WriteByte('\n')
			return nil
		}},
		Msg: sb.Ctl,
	}
}
