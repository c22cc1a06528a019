package world

import (
	"context"
	iofs "io/fs"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// The Dir operations that change names. Each takes layers for reading
// and mu, copies up the directory it changes (upperDirs), and keeps the
// whiteouts right: an entry made where a whiteout was removes it; an
// entry removed where the lower has one leaves a whiteout, written
// before the upper's entry goes, so a kill in between shows the entry,
// never the lower's. Modes are applied exactly (no umask); what is made
// belongs to the caller (cred.Of: the 9P or FUSE client, a guest's
// sandbox owner), so what the world adds lands in the lower as theirs;
// a daemon that is not root cannot give files away and keeps them.

// change runs f with layers held for reading and mu held, after
// checking name and that the world may change.
func (d *Dir) change(name string, f func() error) error {
	if err := d.w.checkName(name); err != nil {
		return err
	}
	if err := d.w.writable(); err != nil {
		return err
	}
	d.w.layers.RLock()
	defer d.w.layers.RUnlock()
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	defer d.w.changed(join(d.p(), name))
	return f()
}

// fresh copies d up and returns it and what name in it is; EEXIST if
// it exists and must not.
func (d *Dir) fresh(name string) (loc, error) {
	p, err := d.w.upperDirs(d.p())
	if err != nil {
		return p, err
	}
	c, err := d.w.child(&p, d.p(), name)
	if err == nil && c.exists() {
		err = syscall.EEXIST
	}
	return p, err
}

// create is Create (writeas.go).
func (d *Dir) create(ctx context.Context, name string, flags sfs.OpenFlags, perm iofs.FileMode) (sfs.Node, sfs.Handle, error) {
	var (
		n  sfs.Node
		fd = -1
	)
	err := d.change(name, func() error {
		if _, err := d.fresh(name); err != nil {
			return err
		}
		return withAt(d.w.upper, d.p(), unix.O_PATH|unix.O_DIRECTORY, func(dirfd int) error {
			var err error
			fd, err = unix.Openat(dirfd, name, sfs.HostOpenFlags(flags)|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, sfs.UnixMode(perm)&0o7777)
			if err != nil {
				return err
			}
			l := loc{up: true}
			uid, gid := ownerOf(ctx)
			if err = unix.Fchown(fd, uid, gid); err == nil {
				err = unix.Fchmod(fd, sfs.UnixMode(perm)&0o7777) // after chown, which clears setuid
			}
			if err == nil {
				err = fstat(fd, &l.us)
			}
			if err != nil {
				unix.Close(fd)
				unix.Unlinkat(dirfd, name, 0)
				return err
			}
			n = d.w.node(join(d.p(), name), l, 0)
			return unwhite(dirfd, name)
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return n, sfs.NewFDHandle(fd), nil
}

// mkdir is Mkdir (writeas.go). Over a whiteout the new directory is
// opaque (the lower's old one must not show through): it is made in
// work/ with its marker, then renamed into place.
func (d *Dir) mkdir(ctx context.Context, name string, perm iofs.FileMode) (sfs.Node, error) {
	var n sfs.Node
	err := d.change(name, func() error {
		if _, err := d.fresh(name); err != nil {
			return err
		}
		return withAt(d.w.upper, d.p(), unix.O_PATH|unix.O_DIRECTORY, func(dirfd int) error {
			_, err := lstatAt(dirfd, whPrefix+name)
			if err == nil {
				err = d.w.mkdirOpaque(dirfd, name, perm)
			} else {
				err = unix.Mkdirat(dirfd, name, 0o700)
			}
			if err != nil {
				return err
			}
			l := loc{up: true}
			err = withAt(dirfd, name, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error {
				uid, gid := ownerOf(ctx)
				if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
					return err
				}
				if err := unix.Chmod(procPath(fd), sfs.UnixMode(perm)&0o7777); err != nil {
					return err
				}
				return fstat(fd, &l.us)
			})
			if err != nil {
				return err
			}
			n = d.w.node(join(d.p(), name), l, 0)
			return unwhite(dirfd, name)
		})
	})
	return n, err
}

// mkdirOpaque makes name in dirfd an opaque directory, atomically.
func (w *World) mkdirOpaque(dirfd int, name string, perm iofs.FileMode) error {
	const tmp = scratch
	if err := removeAll(w.work, tmp); err != nil {
		return err
	}
	if err := unix.Mkdirat(w.work, tmp, 0o700); err != nil {
		return err
	}
	if err := makeMarker(w.work, tmp+"/"+opaqueName); err != nil {
		return err
	}
	return unix.Renameat(w.work, tmp, dirfd, name)
}

// makeMarker makes the empty file path (a whiteout or an opaque marker)
// beneath root; one that exists is fine.
func makeMarker(root int, path string) error {
	return inParent(root, path, func(dirfd int, name string) error {
		fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EEXIST {
			return nil
		}
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
}

// ownerOf is who a new entry belongs to: ctx's caller, or -1 (as made)
// when the daemon is not root.
func ownerOf(ctx context.Context) (int, int) {
	if unix.Geteuid() != 0 {
		return -1, -1
	}
	c := cred.Of(ctx)
	return int(c.UID), int(c.GID)
}

// unwhite removes name's whiteout from the upper directory dirfd.
func unwhite(dirfd int, name string) error {
	if err := unix.Unlinkat(dirfd, whPrefix+name, 0); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

// lowerHas returns the lower's visible entry at name under p (a
// directory at ppath).
func (w *World) lowerHas(p *loc, ppath, name string) (unix.Stat_t, bool) {
	if !p.lowerKids() {
		return unix.Stat_t{}, false
	}
	st, err := lstatAt(w.lower, join(ppath, name))
	return st, err == nil
}

// whiteout hides the lower's entry st at path: its base is recorded,
// then the whiteout made.
func (w *World) whiteout(path string, st *unix.Stat_t) error {
	if err := w.meta.setBase(path, identOf(st)); err != nil {
		return err
	}
	dir, name := split(path)
	return makeMarker(w.upper, join(dir, whPrefix+name))
}

// remove is Remove (writeas.go).
func (d *Dir) remove(_ context.Context, name string, dir bool) error {
	return d.change(name, func() error {
		w := d.w
		p, err := w.upperDirs(d.p())
		if err != nil {
			return err
		}
		c, err := w.child(&p, d.p(), name)
		switch {
		case err != nil:
			return err
		case !c.exists():
			return syscall.ENOENT
		case dir && !c.isDir():
			return syscall.ENOTDIR
		case !dir && c.isDir():
			return syscall.EISDIR
		}
		cp := join(d.p(), name)
		if dir {
			if kids, err := w.list(cp); err != nil || len(kids) > 0 {
				return orErr(err, syscall.ENOTEMPTY)
			}
		}
		if lst, ok := w.lowerHas(&p, d.p(), name); ok {
			if err := w.whiteout(cp, &lst); err != nil {
				return err
			}
		}
		if c.up {
			return w.removeUpper(cp, &c.us)
		}
		return nil
	})
}

func orErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// removeUpper removes the upper's entry at path (st): a directory with
// the whiteouts it still holds; a file's copy-up record with its last
// link.
func (w *World) removeUpper(path string, st *unix.Stat_t) error {
	if isDir(st) {
		return removeAll(w.upper, path)
	}
	err := inParent(w.upper, path, func(dirfd int, name string) error { return unix.Unlinkat(dirfd, name, 0) })
	if err != nil {
		return err
	}
	if st.Nlink <= 1 {
		return w.meta.dropIno(st.Ino)
	}
	return nil
}
