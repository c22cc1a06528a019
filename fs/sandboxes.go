package fs

import (
	"context"
	iofs "io/fs"
)

// sandboxesDir serves /sandboxes/: one directory per listed sandbox (every
// state but removed, including those just reserved by /clone), in
// creation order.
type sandboxesDir struct {
	t    *Tree
	mode iofs.FileMode
}

var _ Dir = (*sandboxesDir)(nil)

// Stat implements Node.Stat.
func (d *sandboxesDir) Stat(context.Context) (Attr, error) {
	return Attr{Mode: iofs.ModeDir | d.mode.Perm()}, nil
}

// Lookup implements Dir.Lookup.
func (d *sandboxesDir) Lookup(ctx context.Context, name string) (Node, error) {
	sb, err := d.t.plane.Lookup(name)
	if err != nil {
		return nil, err
	}
	o := sb.Owner()
	return sandboxTable.Dir(sb, 0o555, &o), nil
}

// List implements Dir.List.
func (d *sandboxesDir) List(context.Context) ([]Dirent, error) {
	sbs := d.t.plane.Sandboxes()
	out := make([]Dirent, len(sbs))
	for i, sb := range sbs {
		out[i] = Dirent{Name: sb.ID(), Mode: iofs.ModeDir}
	}
	return out, nil
}
