package ctlfs

import (
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"
)

// sandboxesDir serves /sandboxes/: one directory per listed sandbox (every
// state but removed, including those just reserved by /clone), in
// creation order.
type sandboxesDir struct {
	t    *Tree
	mode iofs.FileMode
}

var _ sfs.Dir = (*sandboxesDir)(nil)

// Stat implements fs.Node.Stat.
func (d *sandboxesDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
}

// Lookup implements fs.Dir.Lookup.
func (d *sandboxesDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	sb, err := d.t.plane.Lookup(name)
	if err != nil {
		return nil, err
	}
	o := sb.Owner()
	return sandboxTable.Dir(sb, 0o555, &o), nil
}

// List implements fs.Dir.List.
func (d *sandboxesDir) List(context.Context) ([]sfs.Dirent, error) {
	sbs := d.t.plane.Sandboxes()
	out := make([]sfs.Dirent, len(sbs))
	for i, sb := range sbs {
		out[i] = sfs.Dirent{Name: sb.ID(), Mode: iofs.ModeDir}
	}
	return out, nil
}
