package fs

import (
	"context"
	iofs "io/fs"

	"sandfs/ctl/cred"
)

// Entry is one row of a directory table: a name, the mode shown for it,
// and how to make its node from the directory's value v (for example the
// *ctl.Sandbox of a sandboxes/<id>/ directory in package ctlfs).
type Entry[T any] struct {
	Name string
	Mode iofs.FileMode // iofs.ModeDir|perm for directories, perm for files
	New  func(v T, mode iofs.FileMode) Node
}

// Table is a fixed directory, reviewed at a glance as one literal (9front
// devproc.c procdir, acme fsys.c dirtab): Lookup searches it, List is the
// table in order.
type Table[T any] []Entry[T]

// Dir returns the directory that serves table t over value v, owned by
// owner (nil: its parent's owner); its entries are the directory's.
func (t Table[T]) Dir(v T, mode iofs.FileMode, owner *cred.Owner) Dir {
	return &tableDir[T]{t: t, v: v, mode: mode, owner: owner}
}

// tableDir serves a Table for one value.
type tableDir[T any] struct {
	t     Table[T]
	v     T
	mode  iofs.FileMode
	owner *cred.Owner
}

// Stat implements Node.Stat.
func (d *tableDir[T]) Stat(context.Context) (Attr, error) {
	return Attr{Mode: iofs.ModeDir | d.mode.Perm(), Owner: d.owner}, nil
}

// Lookup implements Dir.Lookup.
func (d *tableDir[T]) Lookup(_ context.Context, name string) (Node, error) {
	for _, e := range d.t {
		if e.Name == name {
			return e.New(d.v, e.Mode), nil
		}
	}
	return nil, errNotFound
}

// List implements Dir.List.
func (d *tableDir[T]) List(context.Context) ([]Dirent, error) {
	out := make([]Dirent, len(d.t))
	for i, e := range d.t {
		out[i] = Dirent{Name: e.Name, Mode: e.Mode.Type()}
	}
	return out, nil
}

// FileAttr is the Attr of a generated file with the given mode: size 0,
// since the text exists only once the file is opened.
func FileAttr(mode iofs.FileMode) Attr { return Attr{Mode: mode.Perm()} }

// EmptyDir is a directory with no entries yet (templates/, snapshots/,
// worlds/ until their registries exist).
type EmptyDir struct{ Mode iofs.FileMode }

// Stat implements Node.Stat.
func (d EmptyDir) Stat(context.Context) (Attr, error) {
	return Attr{Mode: iofs.ModeDir | d.Mode.Perm()}, nil
}

// Lookup implements Dir.Lookup.
func (EmptyDir) Lookup(context.Context, string) (Node, error) { return nil, errNotFound }

// List implements Dir.List.
func (EmptyDir) List(context.Context) ([]Dirent, error) { return nil, nil }
