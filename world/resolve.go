package world

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// loc is what a path of the union is: its entry in the upper, in the
// lower, or both (a merged directory).
type loc struct {
	up, low bool        // the upper, the lower has a visible entry
	us, ls  unix.Stat_t // their stat when up, low
	opaque  bool        // up and low directories, but the lower's entries are hidden
}

func (l *loc) exists() bool { return l.up || l.low }

// st is the entry the union shows: the upper's, else the lower's.
func (l *loc) st() *unix.Stat_t {
	if l.up {
		return &l.us
	}
	return &l.ls
}

func (l *loc) isDir() bool { return l.exists() && isDir(l.st()) }

// lowerKids reports whether the lower's entries under a directory show.
func (l *loc) lowerKids() bool { return l.low && isDir(&l.ls) && !l.opaque }

// rootLoc is the root of the union, stated now.
func (w *World) rootLoc() (loc, error) {
	l := loc{up: true, low: w.mode != UnsafeRW}
	if err := fstat(w.upper, &l.us); err != nil {
		return l, err
	}
	if err := fstat(w.lower, &l.ls); err != nil {
		return l, err
	}
	if l.low {
		_, err := lstatAt(w.upper, opaqueName)
		l.opaque = err == nil
	}
	return l, nil
}

// child is what name in the directory ppath (seen as p) is; it does not
// exist (and no error) when neither layer has it or a whiteout hides it.
func (w *World) child(p *loc, ppath, name string) (loc, error) {
	var c loc
	cp := join(ppath, name)
	if p.up && isDir(&p.us) {
		st, err := lstatAt(w.upper, cp)
		switch {
		case err == nil:
			c.up, c.us = true, st
		case err != unix.ENOENT:
			return c, err
		default:
			if _, err := lstatAt(w.upper, join(ppath, whPrefix+name)); err == nil {
				return c, nil
			} else if err != unix.ENOENT {
				return c, err
			}
		}
	}
	if p.lowerKids() && (!c.up || isDir(&c.us)) && !strings.HasPrefix(name, whPrefix) {
		st, err := lstatAt(w.lower, cp)
		switch {
		case err == nil && (!c.up || isDir(&st)):
			c.low, c.ls = true, st
		case err != nil && err != unix.ENOENT:
			return c, err
		}
	}
	if c.up && c.low {
		_, err := lstatAt(w.upper, join(cp, opaqueName))
		c.opaque = err == nil
	}
	return c, nil
}

// resolve returns what path is, walking from the root: ENOENT when it
// does not exist, ENOTDIR when a component on the way is no directory.
func (w *World) resolve(path string) (loc, error) {
	l, err := w.rootLoc()
	if err != nil || path == "" {
		return l, err
	}
	cur := ""
	for _, name := range strings.Split(path, "/") {
		if !l.isDir() {
			return l, syscall.ENOTDIR
		}
		if l, err = w.child(&l, cur, name); err != nil {
			return l, err
		}
		if !l.exists() {
			return l, syscall.ENOENT
		}
		cur = join(cur, name)
	}
	return l, nil
}

// ino is the stable inode number the union shows for l: the lower's
// where the entry comes from the lower (merged directories and copied-up
// files too), else the upper's with bit 62 set, so the two layers'
// numbers never meet. Not bit 63: fs/ninep clears that one in a node's
// number (it marks the QID paths the server makes itself), and a guest
// mounting /workspace cache=loose takes two files with one QID path for
// one inode: an upper-only file whose upper inode number equals a lower
// file's (the layers on two file systems) would show that file's
// attributes and pages. Both bits are cleared in the layers' own
// numbers, which no file system the daemon runs on comes near.
func (w *World) ino(l *loc) uint64 {
	const (
		upperBit  = 1 << 62
		layerMask = 1<<63 | upperBit
	)
	switch {
	case l.low:
		return l.ls.Ino &^ layerMask
	case w.mode == UnsafeRW:
		return l.us.Ino &^ (1 << 63)
	}
	if lo, ok := w.meta.lowerIno(l.us.Ino); ok {
		return lo &^ layerMask
	}
	return l.us.Ino&^layerMask | upperBit
}

// readNames lists the names in the directory open on fd.
func readNames(fd int) ([]string, error) {
	ents, err := sfs.ReadDirents(fd)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name
	}
	return names, err
}
