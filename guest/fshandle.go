package guest

import (
	"context"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// Open implements sfs.Opener. A named pipe is opened non-blocking, so
// that an open never blocks the server.
func (f *fsFile) Open(_ context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	of := sfs.HostOpenFlags(flags) | unix.O_NOCTTY
	if f.st.Mode&unix.S_IFMT == unix.S_IFIFO {
		of |= unix.O_NONBLOCK
	}
	fd, err := f.t.open(f.path, of)
	if err != nil {
		return nil, err
	}
	return sfs.NewFDHandle(fd), nil
}

// Truncate implements sfs.Truncater, through the node's own inode.
func (f *fsFile) Truncate(_ context.Context, size int64) error {
	return f.t.with(f.path, unix.O_PATH, func(fd int) error { return unix.Truncate(procPath(fd), size) })
}

// SetAttr implements sfs.Setattrer: mode, owner, then times, through the
// node's own inode. A symbolic link has no mode of its own (EOPNOTSUPP)
// and keeps its times.
func (n *fsNode) SetAttr(_ context.Context, c sfs.Change) error {
	return n.t.with(n.path, unix.O_PATH, func(fd int) error {
		var st unix.Stat_t
		if err := fstat(fd, &st); err != nil {
			return err
		}
		link := st.Mode&unix.S_IFMT == unix.S_IFLNK
		if c.Mode != nil {
			if link {
				return syscall.EOPNOTSUPP
			}
			if err := unix.Chmod(procPath(fd), sfs.UnixMode(*c.Mode)&0o7777); err != nil {
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
		return unix.UtimesNanoAt(unix.AT_FDCWD, procPath(fd), ts, 0)
	})
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
