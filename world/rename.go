package world

import (
	"context"
	"syscall"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// renameTo is Rename (writeas.go). The source is copied up first (its
// data streamed without mu). A directory the lower has cannot move
// (EXDEV, as overlayfs without redirect_dir: mv then copies); a
// directory moved over one of the lower's is made opaque.
func (d *Dir) renameTo(_ context.Context, oldName string, newDir sfs.Node, newName string) error {
	nd, ok := newDir.(*Dir)
	if !ok || nd.w != d.w {
		return syscall.EXDEV
	}
	if err := d.w.checkName(newName); err != nil {
		return err
	}
	w, src, dst := d.w, join(d.p(), oldName), join(nd.p(), newName)
	if err := d.w.checkName(oldName); err != nil {
		return err
	}
	if err := w.writable(); err != nil {
		return err
	}
	w.layers.RLock()
	defer w.layers.RUnlock()
	s, err := w.resolve(src)
	if err != nil {
		return err
	}
	if s.isDir() && s.low {
		return syscall.EXDEV
	}
	if err := w.copyUp(src, true); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.changed(src, dst)
	return w.rename(d.p(), oldName, nd.p(), newName, src, dst)
}

// rename moves the upper's src to dst. Called with mu held.
func (w *World) rename(odir, oname, ndir, nname, src, dst string) error {
	op, err := w.upperDirs(odir)
	if err != nil {
		return err
	}
	np, err := w.upperDirs(ndir)
	if err != nil {
		return err
	}
	s, err := w.child(&op, odir, oname)
	if err != nil || !s.up {
		return orErr(err, syscall.ENOENT)
	}
	if src == dst {
		return nil
	}
	t, err := w.child(&np, ndir, nname)
	if err != nil {
		return err
	}
	if err := w.clearTarget(&s, &t, dst); err != nil {
		return err
	}
	tst, lowerDst := w.lowerHas(&np, ndir, nname)
	if lowerDst {
		if err := w.meta.setBase(dst, identOf(&tst)); err != nil {
			return err
		}
		if s.isDir() && isDir(&tst) {
			if err := makeMarker(w.upper, join(src, opaqueName)); err != nil {
				return err
			}
		}
	}
	if sst, ok := w.lowerHas(&op, odir, oname); ok {
		if err := w.whiteout(src, &sst); err != nil {
			return err
		}
	}
	err = withAt(w.upper, odir, unix.O_PATH|unix.O_DIRECTORY, func(ofd int) error {
		return withAt(w.upper, ndir, unix.O_PATH|unix.O_DIRECTORY, func(nfd int) error {
			if err := unix.Renameat(ofd, oname, nfd, nname); err != nil {
				return err
			}
			return unwhite(nfd, nname)
		})
	})
	if err != nil {
		if _, ok := w.lowerHas(&op, odir, oname); ok { // the source stays: unhide it
			withAt(w.upper, odir, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error { return unwhite(fd, oname) })
		}
		return err
	}
	if t.up && !isDir(&t.us) && t.us.Nlink <= 1 && t.us.Ino != s.us.Ino {
		return w.meta.dropIno(t.us.Ino)
	}
	return nil
}

// clearTarget checks that the source s may replace the target t at dst
// as rename(2) allows, and empties an empty-looking upper directory of
// its whiteouts so the rename can replace it.
func (w *World) clearTarget(s, t *loc, dst string) error {
	if !t.exists() {
		return nil
	}
	switch {
	case s.isDir() && !t.isDir():
		return syscall.ENOTDIR
	case !s.isDir() && t.isDir():
		return syscall.EISDIR
	case !t.isDir():
		return nil
	}
	if kids, err := w.list(dst); err != nil || len(kids) > 0 {
		return orErr(err, syscall.ENOTEMPTY)
	}
	if !t.up {
		return nil
	}
	return withAt(w.upper, dst, unix.O_RDONLY|unix.O_DIRECTORY, emptyDir)
}

// link is Link (writeas.go): the target is copied up, then linked in
// the upper.
func (d *Dir) link(_ context.Context, target sfs.Node, name string) error {
	var tn *node
	switch t := target.(type) {
	case *File:
		tn = &t.node
	case *Link:
		tn = &t.node
	case *Dir:
		return syscall.EPERM // link(2) of a directory
	}
	if tn == nil || tn.w != d.w {
		return syscall.EXDEV
	}
	if err := d.w.checkName(name); err != nil {
		return err
	}
	if err := d.w.writable(); err != nil {
		return err
	}
	d.w.layers.RLock()
	err := d.w.copyUp(tn.p(), true)
	d.w.layers.RUnlock()
	if err != nil {
		return err
	}
	return d.change(name, func() error {
		if _, err := d.fresh(name); err != nil {
			return err
		}
		return withAt(d.w.upper, d.p(), unix.O_PATH|unix.O_DIRECTORY, func(dirfd int) error {
			err := withAt(d.w.upper, tn.p(), unix.O_PATH, func(tfd int) error {
				return unix.Linkat(unix.AT_FDCWD, procPath(tfd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
			})
			if err != nil {
				return err
			}
			return unwhite(dirfd, name)
		})
	})
}

// symlink is Symlink (writeas.go): the text is stored as given; the
// union never follows it.
func (d *Dir) symlink(ctx context.Context, target, name string) (sfs.Node, error) {
	if len(target) == 0 || len(target) >= unix.PathMax {
		return nil, syscall.EINVAL
	}
	var n sfs.Node
	err := d.change(name, func() error {
		if _, err := d.fresh(name); err != nil {
			return err
		}
		return withAt(d.w.upper, d.p(), unix.O_PATH|unix.O_DIRECTORY, func(dirfd int) error {
			if err := unix.Symlinkat(target, dirfd, name); err != nil {
				return err
			}
			uid, gid := ownerOf(ctx)
			if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
			l := loc{up: true}
			if err := unix.Fstatat(dirfd, name, &l.us, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
			n = d.w.node(join(d.p(), name), l, 0)
			return unwhite(dirfd, name)
		})
	})
	return n, err
}
