package fs

import (
	"bytes"
	"context"
	iofs "io/fs"
)

// errFile serves /err and /sandboxes/<id>/err: the text of the last failed
// request (on /ctl and /clone, or on that sandbox), one line, e.g.
//
//	ctl: unknown verb "bogus"
//
// and nothing at all when nothing has failed.
type errFile struct {
	text func() string
	mode iofs.FileMode
}

var _ Source = (*errFile)(nil)

// Stat implements Node.Stat.
func (f *errFile) Stat(context.Context) (Attr, error) { return fileAttr(f.mode), nil }

// Text implements Source.
func (f *errFile) Text(ctx context.Context, b *bytes.Buffer) error {
	if s := f.text(); s != "" {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return nil
}
