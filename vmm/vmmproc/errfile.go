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
type errFile struct {
	c    *control
	mode iofs.FileMode
}

var _ fs.Source = (*errFile)(nil)

// Stat implements fs.Node.Stat.
func (f *errFile) Stat(context.Context) (fs.Attr, error) { return fs.FileAttr(f.mode), nil }

// Text implements fs.Source.
func (f *errFile) Text(ctx context.Context, b *bytes.Buffer) error {
	f.c.mu.Lock()
	s := f.c.lastErr
	f.c.mu.Unlock()
	if s != "" {
		b.WriteString(s + "\n")
	}
	return nil
}
