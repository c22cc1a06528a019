package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"
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

var _ sfs.Source = (*errFile)(nil)

// Stat implements fs.Node.Stat.
func (f *errFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Text implements fs.Source.
func (f *errFile) Text(ctx context.Context, b *bytes.Buffer) error {
	if s := f.text(); s != "" {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return nil
}
