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
func errFile(text func() string, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		if s := text(); s != "" {
			b.WriteString(s)
			b.WriteByte('\n')
		}
		return nil
	}}
}
