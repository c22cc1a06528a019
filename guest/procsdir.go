package guest

import (
	"context"
	iofs "io/fs"
	"strconv"
	"syscall"

	sfs "sandfs/fs"
)

// procsDir serves procs/: clone, then one directory per live process
// slot, in number order, e.g.
//
//	clone  1  3
type procsDir struct {
	s    *Server
	mode iofs.FileMode
}

var _ sfs.Dir = (*procsDir)(nil)

// Stat implements sfs.Node.Stat.
func (d *procsDir) Stat(context.Context) (sfs.Attr, error) { return synthAttr(d.mode), nil }

// Lookup implements sfs.Dir.Lookup.
func (d *procsDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if name == "clone" {
		return &cloneFile{s: d.s}, nil
	}
	n, err := strconv.Atoi(name)
	if err != nil || strconv.Itoa(n) != name {
		return nil, syscall.ENOENT
	}
	p := d.s.procs.get(n)
	if p == nil {
		return nil, syscall.ENOENT
	}
	return &procDir{p: p}, nil
}

// List implements sfs.Dir.List.
func (d *procsDir) List(context.Context) ([]sfs.Dirent, error) {
	out := []sfs.Dirent{{Name: "clone"}}
	for _, n := range d.s.procs.list() {
		out = append(out, sfs.Dirent{Name: strconv.Itoa(n), Mode: iofs.ModeDir})
	}
	return out, nil
}

// procDir serves procs/<n>/, whose files are procFiles. It vanishes
// (ENOENT) once the slot is freed.
type procDir struct{ p *proc }

var _ sfs.Dir = (*procDir)(nil)

// Stat implements sfs.Node.Stat.
func (d *procDir) Stat(context.Context) (sfs.Attr, error) {
	if d.p.tab.get(d.p.n) != d.p {
		return sfs.Attr{}, syscall.ENOENT
	}
	return synthAttr(iofs.ModeDir | 0o555), nil
}

// Lookup implements sfs.Dir.Lookup.
func (d *procDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	if d.p.tab.get(d.p.n) != d.p {
		return nil, syscall.ENOENT // freed meanwhile
	}
	return procFiles.Dir(d.p, 0o555, nil).Lookup(ctx, name)
}

// List implements sfs.Dir.List.
func (d *procDir) List(ctx context.Context) ([]sfs.Dirent, error) {
	return procFiles.Dir(d.p, 0o555, nil).List(ctx)
}
