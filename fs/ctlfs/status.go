package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// statusFile serves /sandboxes/<id>/status, one line in fixed field order
// (ctl.Sandbox.Status; new fields only ever go at the end), e.g.
//
//	box1 running template=base mem=256M cpus=1 world=- created=1764423000 timeout=0 deadline=0 pid=4242 limits=cgroup2
func statusFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(sb.Status())
		b.WriteByte('\n')
		return nil
	}}
}
