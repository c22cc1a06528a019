package fs

import (
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SetAttrFD applies c to the file open on fd (any descriptor, O_PATH
// too), never following a symbolic link: mode (EOPNOTSUPP on a link),
// owner, then times (a link keeps its own). The passthrough trees (the
// guest's fs/, a world's union) share it.
func SetAttrFD(fd int, c Change) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "", &st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	link := st.Mode&unix.S_IFMT == unix.S_IFLNK
	inode := "/proc/self/fd/" + strconv.Itoa(fd) // the inode, never a path
	if c.Mode != nil {
		if link {
			return syscall.EOPNOTSUPP
		}
		if err := unix.Chmod(inode, UnixMode(*c.Mode)&0o7777); err != nil {
			return err
		}
	}
	if c.UID != nil || c.GID != nil {
		uid, gid := -1, -1
		if c.UID != nil {
			uid = int(*c.UID)
		}
		if c.GID != nil {
			gid = int(*c.GID)
		}
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if (c.Atime == nil && c.Mtime == nil) || link {
		return nil
	}
	ts := []unix.Timespec{timespec(c.Atime), timespec(c.Mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, inode, ts, 0)
}

// timespec is utimensat's time for a Change time: omit, now or t.
func timespec(t *time.Time) unix.Timespec {
	switch {
	case t == nil:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	case t.IsZero():
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.NsecToTimespec(t.UnixNano())
}
