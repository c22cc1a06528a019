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
		out = append(out, sfs.Dirent{Name: strconv.Itoa(n), Mode: iofs.ModeDir, Ino: slotIno(n, 0)})
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
	a := synthAttr(iofs.ModeDir | 0o555)
	a.Ino = slotIno(d.p.n, 0)
	return a, nil
}

// Lookup implements sfs.Dir.Lookup.
func (d *procDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if d.p.tab.get(d.p.n) != d.p {
		return nil, syscall.ENOENT // freed meanwhile
	}
	for i, e := range procFiles {
		if e.Name == name {
			f := e.New(d.p, e.Mode).(*slotFile)
			f.ino = slotIno(d.p.n, i+1)
			return f, nil
		}
	}
	return nil, syscall.ENOENT
}

// List implements sfs.Dir.List.
func (d *procDir) List(context.Context) ([]sfs.Dirent, error) {
	out := make([]sfs.Dirent, len(procFiles))
	for i, e := range procFiles {
		out[i] = sfs.Dirent{Name: e.Name, Ino: slotIno(d.p.n, i+1)}
	}
	return out, nil
}

// slotIno is the inode number procs/<n>/ (kind 0) and its files (kind
// i+1, i their row in procFiles) show, the 9P QID path: slot numbers are
// never reused, so neither are these, and the server keeps no table of
// them (it would grow with every process). Bit 62 keeps them clear of
// fs/'s real inode numbers.
func slotIno(n, kind int) uint64 { return 1<<62 | uint64(n)<<8 | uint64(kind) }
