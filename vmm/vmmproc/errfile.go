package vmmproc

import (
	"bytes"
	"context"
	iofs "io/fs"

	"sandfs/fs"
)

// errFile serves /err: the text of the last failed ctl write, one line,
// e.g.
//
//	save: machine is not paused
//
// and nothing while nothing has failed.
func errFile(c *control, mode iofs.FileMode) fs.Node {
	return &fs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		c.mu.Lock()
		s := c.lastErr
		c.mu.Unlock()
		if s != "" {
			b.WriteString(s + "\n")
		}
		return nil
	}}
}
