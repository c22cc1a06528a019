package world

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// applyFile writes the upper's non-directory p over the lower's: made
// under a temporary name beside it (".sandfs-apply-<upper inode>"),
// synced, renamed into place, the directory synced; then the upper's
// entry is removed.
// The upper's file is read as the daemon, the lower written through lw.
func (w *World) applyFile(p string, lw lowerWriter) error {
	us, err := lstatAt(w.upper, p)
	if err != nil {
		return err
	}
	src := upperFile{fd: -1}
	switch {
	case isLink(&us):
		src.target, err = readlinkAt(w.upper, p)
	case isReg(&us):
		src.fd, err = openAt(w.upper, p, unix.O_RDONLY, 0)
		defer unix.Close(src.fd)
	}
	if err != nil {
		return err
	}
	st := lw.owned(&us)
	err = lw.run(func() error {
		return inParent(w.lower, p, func(ldir int, name string) error {
			tmp := ".sandfs-apply-" + strconv.FormatUint(us.Ino, 10)
			if err := unix.Unlinkat(ldir, tmp, 0); err != nil && err != unix.ENOENT {
				return err
			}
			if err := writeLower(src, st, ldir, tmp); err != nil {
				unix.Unlinkat(ldir, tmp, 0)
				return err
			}
			if err := unix.Renameat(ldir, tmp, ldir, name); err != nil {
				unix.Unlinkat(ldir, tmp, 0)
				return err
			}
			return syncDir(ldir)
		})
	})
	if err != nil {
		return err
	}
	if w.applyHook != nil {
		w.applyHook(p)
	}
	if err := w.removeUpper(p, &us); err != nil {
		return err
	}
	return w.meta.dropBase(p)
}

// upperFile is what apply read of an upper file: a regular file open,
// or a symbolic link's text.
type upperFile struct {
	fd     int
	target string
}

// writeLower makes tmp in the lower directory ldir a synced copy of the
// upper's file src (its attributes upper), never setuid or setgid: the
// upper's files are the daemon's with the modes a guest chose.
func writeLower(src upperFile, upper *unix.Stat_t, ldir int, tmp string) error {
	st := *upper
	st.Mode &^= unix.S_ISUID | unix.S_ISGID
	us := &st
	switch {
	case isLink(us):
		if err := unix.Symlinkat(src.target, ldir, tmp); err != nil {
			return err
		}
		return withAt(ldir, tmp, unix.O_PATH, func(fd int) error { return copyAttrs(fd, us) })
	case !isReg(us):
		if err := unix.Mknodat(ldir, tmp, us.Mode, int(us.Rdev)); err != nil {
			return err
		}
		return withAt(ldir, tmp, unix.O_PATH, func(fd int) error { return copyAttrs(fd, us) })
	}
	dst, err := unix.Openat(ldir, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(dst)
	if err := copyRange(src.fd, dst, nil); err != nil {
		return err
	}
	if err := copyAttrs(dst, us); err != nil {
		return err
	}
	return unix.Fsync(dst)
}

// copyRange copies src to dst from offset 0 to src's end:
// copy_file_range(2), or pread and pwrite where the file systems
// differ; progress (if not nil) is told each chunk.
func copyRange(src, dst int, progress func(n int)) error {
	var off int64
	var buf []byte
	for {
		var n int
		var err error
		if buf == nil {
			n, err = unix.CopyFileRange(src, &off, dst, nil, copyChunk, 0)
			if err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
				buf = make([]byte, copyChunk)
				continue
			}
		} else if n, err = unix.Pread(src, buf, off); err == nil && n > 0 {
			if _, err = unix.Pwrite(dst, buf[:n], off); err == nil {
				off += int64(n)
			}
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return err
		}
		if progress != nil {
			progress(n)
		}
	}
}

// sameContent reports whether the regular file p has the same bytes in
// both layers.
func sameContent(a, b int, p string) (bool, error) {
	fa, err := openAt(a, p, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fa)
	fb, err := openAt(b, p, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fb)
	ba, bb := make([]byte, 256<<10), make([]byte, 256<<10)
	for off := int64(0); ; {
		na, err := unix.Pread(fa, ba, off)
		if err != nil {
			return false, err
		}
		nb, err := unix.Pread(fb, bb[:max(na, 1)], off)
		if err != nil {
			return false, err
		}
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if na == 0 {
			return true, nil
		}
		off += int64(na)
	}
}

// syncDir fsyncs the directory ldir (an O_PATH descriptor).
func syncDir(ldir int) error {
	return withAt(ldir, "", unix.O_RDONLY|unix.O_DIRECTORY, unix.Fsync)
}

// syncParent fsyncs p's directory beneath root.
func syncParent(root int, p string) error {
	return inParent(root, p, func(dirfd int, _ string) error { return syncDir(dirfd) })
}
