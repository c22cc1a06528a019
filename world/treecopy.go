package world

import (
	"golang.org/x/sys/unix"
)

// treeCopy copies a directory tree from beneath one root descriptor to
// beneath another (Save, Restore): modes, owners, times, symbolic links
// (as text), whiteouts (plain files) and hard links kept; a regular
// file's data cloned (FICLONE) where the file system can, else copied.
type treeCopy struct {
	src, dst int
	seen     map[uint64]string // a source file of several links → its copy's path
	inos     map[uint64]uint64 // source inode → its copy's inode
	stats    SaveStats
}

func newTreeCopy(src, dst int) *treeCopy {
	return &treeCopy{src: src, dst: dst, seen: map[uint64]string{}, inos: map[uint64]uint64{}}
}

// copy copies srcPath ("" for the source root) to dstPath, which must
// not exist (its parent must).
func (tc *treeCopy) copy(srcPath, dstPath string) error {
	st, err := lstatAt(tc.src, srcPath)
	if err != nil {
		return err
	}
	return tc.entry(srcPath, dstPath, &st)
}

// mapInos returns inos (upper inode → lower inode, the origins') with
// each source inode replaced by its copy's; those not copied are dropped.
func (tc *treeCopy) mapInos(inos map[uint64]uint64) map[uint64]uint64 {
	out := make(map[uint64]uint64, len(inos))
	for u, l := range inos {
		if d, ok := tc.inos[u]; ok {
			out[d] = l
		}
	}
	return out
}

func (tc *treeCopy) entry(sp, dp string, st *unix.Stat_t) error {
	switch {
	case isDir(st):
		return tc.dir(sp, dp, st)
	case isReg(st):
		if first, ok := tc.seen[st.Ino]; ok {
			return tc.link(first, dp)
		}
		return tc.file(sp, dp, st)
	case isLink(st):
		target, err := readlinkAt(tc.src, sp)
		if err != nil {
			return err
		}
		err = inParent(tc.dst, dp, func(dirfd int, name string) error { return unix.Symlinkat(target, dirfd, name) })
		if err != nil {
			return err
		}
	default:
		err := inParent(tc.dst, dp, func(dirfd int, name string) error {
			return unix.Mknodat(dirfd, name, st.Mode, int(st.Rdev))
		})
		if err != nil {
			return err
		}
	}
	return withAt(tc.dst, dp, unix.O_PATH, func(fd int) error { return tc.done(fd, st) })
}

// done gives the copy open on fd st's attributes and records its inode.
func (tc *treeCopy) done(fd int, st *unix.Stat_t) error {
	if err := copyAttrs(fd, st); err != nil {
		return err
	}
	var ds unix.Stat_t
	if err := fstat(fd, &ds); err != nil {
		return err
	}
	tc.inos[st.Ino] = ds.Ino
	return nil
}

// dir copies a directory and everything in it; its attributes last, so
// its times are the source's.
func (tc *treeCopy) dir(sp, dp string, st *unix.Stat_t) error {
	err := inParent(tc.dst, dp, func(dirfd int, name string) error { return unix.Mkdirat(dirfd, name, 0o700) })
	if err != nil {
		return err
	}
	var names []string
	err = withAt(tc.src, sp, unix.O_RDONLY|unix.O_DIRECTORY, func(fd int) error {
		names, err = readNames(fd)
		return err
	})
	if err != nil {
		return err
	}
	for _, n := range names {
		cs, err := lstatAt(tc.src, join(sp, n))
		if err != nil {
			return err
		}
		if err := tc.entry(join(sp, n), join(dp, n), &cs); err != nil {
			return err
		}
	}
	return withAt(tc.dst, dp, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error { return tc.done(fd, st) })
}

// file copies a regular file's data and attributes.
func (tc *treeCopy) file(sp, dp string, st *unix.Stat_t) error {
	sfd, err := openAt(tc.src, sp, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd := -1
	err = inParent(tc.dst, dp, func(dirfd int, name string) error {
		dfd, err = unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.IoctlFileClone(dfd, sfd); err == nil {
		tc.stats.Cloned++
	} else if err := copyRange(sfd, dfd, nil); err != nil {
		return err
	} else {
		tc.stats.Copied++
	}
	tc.stats.Bytes += st.Size
	if st.Nlink > 1 {
		tc.seen[st.Ino] = dp
	}
	return tc.done(dfd, st)
}

// link makes dp another link to the copy at first.
func (tc *treeCopy) link(first, dp string) error {
	return withAt(tc.dst, first, unix.O_PATH, func(fd int) error {
		return inParent(tc.dst, dp, func(dirfd int, name string) error {
			return unix.Linkat(unix.AT_FDCWD, procPath(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
		})
	})
}
