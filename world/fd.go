package world

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// The descriptor helpers: everything is reached beneath a root
// descriptor, never following a symbolic link.

// openAt opens path (relative to root, "" for root itself) without
// following any symbolic link, without leaving root and without crossing
// into another mount: the daemon opens as root, and a mount under a lower
// (/proc under lower=/) has files whose access the kernel decides at open
// from the opener's credentials, not from the modes the union checks.
func openAt(root int, path string, flags int, mode uint32) (int, error) {
	if path == "" {
		path = "."
	}
	for {
		fd, err := unix.Openat2(root, path, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err == unix.EAGAIN || err == unix.EINTR { // a rename raced the lookup
			continue
		}
		return fd, err
	}
}

// withAt runs f on a descriptor of path opened with flags, then closes it.
func withAt(root int, path string, flags int, f func(fd int) error) error {
	fd, err := openAt(root, path, flags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

// inParent runs f with an O_PATH descriptor of path's directory and its
// last name.
func inParent(root int, path string, f func(dirfd int, name string) error) error {
	dir, name := split(path)
	return withAt(root, dir, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error { return f(fd, name) })
}

// lstatAt says what is at path, a symbolic link being itself.
func lstatAt(root int, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := withAt(root, path, unix.O_PATH, func(fd int) error { return fstat(fd, &st) })
	return st, err
}

func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

func fstat(fd int, st *unix.Stat_t) error {
	return unix.Fstatat(fd, "", st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// procPath names the inode of descriptor fd, never a path.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

func isDir(st *unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isLink(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }
func isReg(st *unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFREG }

// copyAttrs gives the file open on fd (any descriptor, O_PATH too) st's
// mode, owner and times. A symbolic link keeps its mode; an owner the
// daemon may not give (it is not root) is left as is.
func copyAttrs(fd int, st *unix.Stat_t) error {
	if !isLink(st) {
		if err := unix.Chmod(procPath(fd), st.Mode&0o7777); err != nil {
			return err
		}
	}
	err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !(err == unix.EPERM && unix.Geteuid() != 0) {
		return err
	}
	if !isLink(st) { // chmod after chown: chown clears setuid
		if err := unix.Chmod(procPath(fd), st.Mode&0o7777); err != nil {
			return err
		}
	}
	return setTimes(fd, st)
}

// setTimes gives the file open on fd st's access and modification
// times (a link's own times through its parent is not worth it: links
// keep theirs).
func setTimes(fd int, st *unix.Stat_t) error {
	if isLink(st) {
		return nil
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, procPath(fd), ts, 0)
}

// removeAll removes path (beneath root) and everything under it, never
// following a symbolic link; a missing path is no error.
func removeAll(root int, path string) error {
	err := inParent(root, path, func(dirfd int, name string) error {
		err := unix.Unlinkat(dirfd, name, 0)
		if err != unix.EISDIR && err != unix.EPERM {
			return err
		}
		if err := withAt(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, func(fd int) error {
			return emptyDir(fd)
		}); err != nil {
			return err
		}
		return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	})
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// emptyDir removes everything in the directory open on fd.
func emptyDir(fd int) error {
	ents, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := removeAll(fd, e); err != nil {
			return err
		}
	}
	return nil
}
