package world

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// node is a path of the union and what it was last seen as; the first
// Stat (the adapter's, right after the lookup) uses that, later ones and
// opens state its entry again (current), changes resolve the path again.
type node struct {
	w    *World
	path atomic.Pointer[string] // "" for the root; a rename moves it (Moved)
	seen atomic.Pointer[sight]
	used atomic.Bool
}

// sight is what a node's path was at a generation of World.clog (read
// before it was seen; 0: unknown).
type sight struct {
	l   loc
	gen uint64
}

// fresh reports whether what s saw of path still holds for the upper's
// names: no change since touched path or a directory above it; and the
// generation it holds at (the node may be stamped with it: keep). A
// view (UpperView) shows the upper's own names, which a change of
// another path's may touch too (its whiteout, its parent's opaque
// marker): for it, any change since does.
func (w *World) fresh(s *sight, path string) (bool, uint64) {
	if w.ro {
		return s.gen != 0 && s.gen == w.clog.load(), s.gen
	}
	touched, at := w.clog.touches(s.gen, path)
	return !touched, at
}

// keep stamps n, seen as s, with what it is at generation at (fresh),
// so that its next use looks at the changes after at only; unless
// another use stamped it meanwhile.
func keep(n *node, s *sight, l loc, at uint64) {
	if at != s.gen || l != s.l {
		n.seen.CompareAndSwap(s, &sight{l: l, gen: at})
	}
}

// sameFile reports whether a and b state one file of one type.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Mode&unix.S_IFMT == b.Mode&unix.S_IFMT && a.Ino == b.Ino && a.Dev == b.Dev
}

// Dir is a directory of the union, File any other file but a symbolic
// link, Link a symbolic link.
type (
	Dir  struct{ node }
	File struct{ node }
	Link struct{ node }
)

var (
	_ sfs.Dir        = (*Dir)(nil)
	_ sfs.Creator    = (*Dir)(nil)
	_ sfs.Mkdirer    = (*Dir)(nil)
	_ sfs.Remover    = (*Dir)(nil)
	_ sfs.Renamer    = (*Dir)(nil)
	_ sfs.Linker     = (*Dir)(nil)
	_ sfs.Symlinker  = (*Dir)(nil)
	_ sfs.Setattrer  = (*Dir)(nil)
	_ sfs.StatFSer   = (*Dir)(nil)
	_ sfs.Opener     = (*File)(nil)
	_ sfs.Truncater  = (*File)(nil)
	_ sfs.Setattrer  = (*File)(nil)
	_ sfs.Readlinker = (*Link)(nil)
	_ sfs.Opener     = (*Link)(nil)
	_ sfs.Setattrer  = (*Link)(nil)
	_ sfs.Mover      = (*File)(nil)
	_ sfs.Mover      = (*Dir)(nil)
	_ sfs.Mover      = (*Link)(nil)
)

// Root returns the union's root directory.
func (w *World) Root() (sfs.Dir, error) {
	w.layers.RLock()
	defer w.layers.RUnlock()
	g := w.clog.load()
	l, err := w.rootLoc()
	if err != nil {
		return nil, err
	}
	return w.node("", l, g).(*Dir), nil
}

// node makes the node of path, seen as l at generation g.
func (w *World) node(path string, l loc, g uint64) sfs.Node {
	var n sfs.Node
	var nn *node
	switch {
	case l.isDir():
		d := &Dir{node{w: w}}
		n, nn = d, &d.node
	case isLink(l.st()):
		k := &Link{node{w: w}}
		n, nn = k, &k.node
	default:
		f := &File{node{w: w}}
		n, nn = f, &f.node
	}
	nn.path.Store(&path)
	nn.seen.Store(&sight{l: l, gen: g})
	return n
}

// p is the node's path.
func (n *node) p() string { return *n.path.Load() }

// Moved implements sfs.Mover: a rename (through any node) moved this
// file to newName in newDir; the node follows it, so a 9P fid keeps
// naming its file (the kernel's 9p client opens a renamed file through
// the fid it walked before).
func (n *node) Moved(newDir sfs.Node, newName string) {
	d, ok := newDir.(*Dir)
	if !ok || d.w != n.w {
		return
	}
	p := join(d.p(), newName)
	n.path.Store(&p)
	n.used.Store(true) // its loc is the old path's
}

// Stat implements sfs.Node.Stat: the entry's own owner, mode and times;
// its inode number is stable across copy-up (World.ino).
func (n *node) Stat(context.Context) (sfs.Attr, error) {
	l := n.seen.Load().l
	if n.used.Swap(true) {
		var err error
		n.w.layers.RLock()
		l, err = n.w.current(n)
		n.w.layers.RUnlock()
		if err != nil {
			return sfs.Attr{}, err
		}
	}
	st := l.st()
	return sfs.Attr{
		Mode:  sfs.ModeOfUnix(st.Mode),
		Size:  st.Size,
		Mtime: time.Unix(st.Mtim.Unix()),
		Owner: &cred.Owner{UID: st.Uid, GID: st.Gid},
		Ino:   n.w.ino(&l), Nlink: st.Nlink, Rdev: st.Rdev, Blocks: st.Blocks,
		Atime: time.Unix(st.Atim.Unix()), Ctime: time.Unix(st.Ctim.Unix()),
	}, nil
}

// current is what n is now; layers held. While no change of the upper
// touched n's path since n was seen (fresh), n shows from the same
// layer, so only its entry there is stated again (an openat2, fstat and
// close) rather than every directory from the root (about eight system
// calls each); after a change of its path or a directory above it, or
// when the entry is no longer the file its layer had (a lower changed
// from outside), the path is resolved again.
func (w *World) current(n *node) (loc, error) {
	p := n.p()
	if p == "" {
		return w.rootLoc()
	}
	s := n.seen.Load()
	if l, at, ok := w.restat(p, s); ok {
		keep(n, s, l, at)
		return l, nil
	}
	return w.refresh(n) // kept: its next use states the new file
}

// restat is what path, seen as s, is now (and the generation it is
// fresh at), if no change of the upper touched path since (fresh) and
// its entry in the layer it showed from is still the file seen (one
// openat2, fstat and close); ok false means path must be resolved
// again. Layers held.
func (w *World) restat(path string, s *sight) (l loc, at uint64, ok bool) {
	fresh, at := w.fresh(s, path)
	if !fresh {
		return loc{}, 0, false
	}
	l = s.l
	root, st := w.lower, &l.ls
	if l.up {
		root, st = w.upper, &l.us
	}
	now, err := lstatAt(root, path)
	if err != nil || !sameFile(&now, st) {
		return loc{}, 0, false
	}
	*st = now
	return l, at, true
}

// sighted is what n's path is now, for what depends only on the upper's
// names (a lookup's layers): what n saw, if no change of the upper
// touched its path since (no system call), else refresh. Layers held.
func (w *World) sighted(n *node) (loc, error) {
	s := n.seen.Load()
	if fresh, at := w.fresh(s, n.p()); fresh {
		keep(n, s, s.l, at)
		return s.l, nil
	}
	return w.refresh(n)
}

// refresh resolves n's path again, and n keeps what it is (so that a
// change of the upper costs each node one resolution, not one per use).
// Layers held.
func (w *World) refresh(n *node) (loc, error) {
	g := w.clog.load()
	l, err := w.resolve(n.p())
	if err == nil {
		n.seen.Store(&sight{l: l, gen: g})
	}
	return l, err
}

// StatFS implements sfs.StatFSer: the upper's file system, where
// changes go.
func (n *node) StatFS(context.Context) (sfs.FSStat, error) {
	n.w.layers.RLock()
	defer n.w.layers.RUnlock()
	var s unix.Statfs_t
	if err := unix.Fstatfs(n.w.upper, &s); err != nil {
		return sfs.FSStat{}, err
	}
	return sfs.FSStat{
		Type: uint32(s.Type), BlockSize: uint32(s.Bsize), Blocks: s.Blocks, BlocksFree: s.Bfree,
		BlocksAv: s.Bavail, Files: s.Files, FilesFree: s.Ffree,
		FSID: uint64(uint32(s.Fsid.Val[0])) | uint64(uint32(s.Fsid.Val[1]))<<32, NameLength: uint32(s.Namelen),
	}, nil
}

// Lookup implements sfs.Dir.Lookup.
func (d *Dir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if err := d.w.checkName(name); err != nil {
		return nil, syscall.ENOENT
	}
	d.w.layers.RLock()
	defer d.w.layers.RUnlock()
	g := d.w.clog.load()
	p, err := d.w.sighted(&d.node)
	if err != nil {
		return nil, err
	}
	if !p.isDir() {
		return nil, syscall.ENOTDIR
	}
	c, err := d.w.child(&p, d.p(), name)
	if err != nil {
		return nil, err
	}
	if !c.exists() {
		return nil, syscall.ENOENT
	}
	return d.w.node(join(d.p(), name), c, g), nil
}

// List implements sfs.Dir.List: the upper's entries and the lower's
// that no upper entry or whiteout hides, sorted by name.
func (d *Dir) List(context.Context) ([]sfs.Dirent, error) {
	d.w.layers.RLock()
	defer d.w.layers.RUnlock()
	l, err := d.w.current(&d.node)
	if err != nil {
		return nil, err
	}
	return d.w.entries(d.p(), &l)
}

// list lists the union's directory path. Called with layers held.
func (w *World) list(path string) ([]sfs.Dirent, error) {
	l, err := w.resolve(path)
	if err != nil {
		return nil, err
	}
	return w.entries(path, &l)
}

// entries lists path, seen as l. Called with layers held.
func (w *World) entries(path string, l *loc) ([]sfs.Dirent, error) {
	if !l.isDir() {
		return nil, syscall.ENOTDIR
	}
	seen := map[string]bool{}
	var out []sfs.Dirent
	if l.up {
		ups, err := listAt(w.upper, path)
		if err != nil {
			return nil, err
		}
		for _, e := range ups {
			if w.reserved(e.Name) {
				seen[e.Name[len(whPrefix):]] = true
				continue
			}
			seen[e.Name] = true
			e.Ino = 0 // the upper's number is not the one Stat shows
			out = append(out, e)
		}
	}
	if l.lowerKids() {
		lows, err := listAt(w.lower, path)
		if err != nil {
			return nil, err
		}
		for _, e := range lows {
			if !seen[e.Name] && !w.reserved(e.Name) {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b sfs.Dirent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listAt lists the directory path beneath root.
func listAt(root int, path string) ([]sfs.Dirent, error) {
	var out []sfs.Dirent
	err := withAt(root, path, unix.O_RDONLY|unix.O_DIRECTORY, func(fd int) error {
		var err error
		out, err = sfs.ReadDirents(fd)
		return err
	})
	return out, err
}

// Readlink implements sfs.Readlinker.
func (l *Link) Readlink(context.Context) (string, error) {
	w := l.w
	w.layers.RLock()
	defer w.layers.RUnlock()
	loc, err := w.current(&l.node)
	if err != nil {
		return "", err
	}
	return readlinkAt(w.layerOf(&loc), l.p())
}

// layerOf is the root descriptor of the layer l's entry is in.
func (w *World) layerOf(l *loc) int {
	if l.up {
		return w.upper
	}
	return w.lower
}

func readlinkAt(root int, path string) (string, error) {
	var s string
	err := withAt(root, path, unix.O_PATH, func(fd int) error {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		s = string(buf[:max(n, 0)])
		return err
	})
	return s, err
}

// Open implements sfs.Opener: a symbolic link is never followed.
func (l *Link) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return nil, syscall.ELOOP
}

// open is File.Open (writeas.go): a read opens the entry where it is; a
// write, or O_TRUNC, copies it up first (without its data for O_TRUNC)
// and opens the upper's copy. A named pipe is opened non-blocking.
func (f *File) open(_ context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	w := f.w
	of := sfs.HostOpenFlags(flags) | unix.O_NOCTTY
	w.layers.RLock()
	defer w.layers.RUnlock()
	if !flags.Writable() && of&unix.O_TRUNC == 0 {
		if fd, ok := w.openSeen(&f.node, of); ok {
			return sfs.NewFDHandle(fd), nil
		}
	}
	l, err := w.current(&f.node)
	if err != nil {
		return nil, err
	}
	if l.isDir() {
		return nil, syscall.EISDIR
	}
	switch l.st().Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		of |= unix.O_NONBLOCK
	case unix.S_IFCHR, unix.S_IFBLK:
		// Opened by the daemon, as root: the kernel's own checks at open
		// (/dev/kmsg's CAP_SYSLOG) would pass for anyone the mode lets.
		return nil, syscall.EACCES
	}
	root := w.layerOf(&l)
	if flags.Writable() || of&unix.O_TRUNC != 0 {
		if err := w.writable(); err != nil {
			return nil, err
		}
		if err := w.copyUp(f.p(), of&unix.O_TRUNC == 0); err != nil {
			return nil, err
		}
		root = w.upper
	}
	fd, err := openAt(root, f.p(), of, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFCHR || st.Mode&unix.S_IFMT == unix.S_IFBLK {
		unix.Close(fd) // a device swapped in since the check
		return nil, orErr(err, syscall.EACCES)
	}
	return sfs.NewFDHandle(fd), nil
}

// openSeen opens n with flags of (a read) where it was seen, while the
// upper's names are as they were then and it was a regular file: an
// openat2 and an fstat (not current's three system calls first), the
// descriptor's file checked to be the one seen, else closed and false.
// O_NONBLOCK, which a regular file ignores, keeps a named pipe put in its
// place from outside from holding the open. Layers held.
func (w *World) openSeen(n *node, of int) (int, bool) {
	s, p := n.seen.Load(), n.p()
	if fresh, _ := w.fresh(s, p); p == "" || !fresh || !isReg(s.l.st()) {
		return -1, false
	}
	fd, err := openAt(w.layerOf(&s.l), p, of|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, false
	}
	var st unix.Stat_t
	if fstat(fd, &st) != nil || !sameFile(&st, s.l.st()) {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}
