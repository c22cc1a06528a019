package vmmproc

import (
	"bytes"
	"context"
	iofs "io/fs"

	"sandfs/fs"
)

// ctlFile serves /ctl: a write is one message (controlVerbs), e.g.
//
//	save /run/sandfs/t1/work/snap
//
// and a read is the sandbox's id and the machine's state, e.g.
//
//	t1 paused
func ctlFile(c *control, mode iofs.FileMode) fs.Node {
	return &fs.CtlFile{
		TextFile: fs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
			b.WriteString(c.cfg.ID + " " + c.state() + "\n")
			return nil
		}},
		Msg: func(_ context.Context, m []byte) error { return c.message(m) },
	}
}
