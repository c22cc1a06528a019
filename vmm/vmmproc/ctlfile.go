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
type ctlFile struct {
	c    *control
	mode iofs.FileMode
}

var (
	_ fs.Source = (*ctlFile)(nil)
	_ fs.Sink   = (*ctlFile)(nil)
)

// Stat implements fs.Node.Stat.
func (f *ctlFile) Stat(context.Context) (fs.Attr, error) { return fs.FileAttr(f.mode), nil }

// Text implements fs.Source.
func (f *ctlFile) Text(ctx context.Context, b *bytes.Buffer) error {
	b.WriteString(f.c.cfg.ID + " " + f.c.state() + "\n")
	return nil
}

// Message implements fs.Sink.
func (f *ctlFile) Message(ctx context.Context, m []byte) error { return f.c.message(m) }
