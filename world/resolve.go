package world

import (
	"strings"
	"sync"
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

// resolve returns what path is: ENOENT when it does not exist, ENOTDIR
// when a component on the way is no directory. Its last component is
// stated now; the directories on the way are what they were last seen
// as, while no change of the upper touched them since (resolveDir).
func (w *World) resolve(path string) (loc, error) {
	if path == "" {
		return w.rootLoc()
	}
	dir, name := split(path)
	p, err := w.resolveDir(dir)
	if err != nil {
		return p, err
	}
	if !p.isDir() {
		return p, syscall.ENOTDIR
	}
	l, err := w.child(&p, dir, name)
	if err == nil && !l.exists() {
		err = syscall.ENOENT
	}
	return l, err
}

// resolveDir is resolve of a directory on the way to a path, from
// w.dirs while no change touched it (or a directory above it) since it
// was resolved: its layers (up, low, opaque) are what a child's lookup
// needs, and only a change of its own path changes them. Its attributes
// may be older than the directory's (a file created in it since).
// Until 2026-12-04 every resolution stated every directory from the
// root again (about eight system calls each), and every change of the
// upper sent every node back to that.
func (w *World) resolveDir(path string) (loc, error) {
	if s := w.dirs.get(path); s != nil {
		if fresh, _ := w.fresh(s, path); fresh {
			return s.l, nil
		}
	}
	g := w.clog.load()
	l, err := w.resolve(path)
	if err == nil && l.isDir() {
		w.dirs.put(path, &sight{l: l, gen: g})
	}
	return l, err
}

// dirCacheMax bounds a world's cache of resolved directories: past it,
// the cache starts afresh.
const dirCacheMax = 1024

// dirCache is what a world's directories were last resolved as, by path
// (resolveDir). The zero value is empty.
type dirCache struct {
	mu sync.Mutex // a leaf
	m  map[string]*sight
}

func (c *dirCache) get(path string) *sight {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[path]
}

func (c *dirCache) put(path string, s *sight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= dirCacheMax {
		c.m = make(map[string]*sight)
	}
	c.m[path] = s
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
