package guest

import (
	"context"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// openFlags keeps the open(2) flags a client may choose.
func openFlags(f sfs.OpenFlags) int {
	return int(f) & (unix.O_ACCMODE | unix.O_TRUNC | unix.O_APPEND | unix.O_DSYNC | unix.O_SYNC | unix.O_NOATIME)
}

// Open implements sfs.Opener. A named pipe is opened non-blocking, so
// that an open never blocks the server.
func (f *fsFile) Open(_ context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	of := openFlags(flags) | unix.O_NOCTTY
	if f.st.Mode&unix.S_IFMT == unix.S_IFIFO {
		of |= unix.O_NONBLOCK
	}
	fd, err := f.t.open(f.path, of)
	if err != nil {
		return nil, err
	}
	return &fsHandle{fd: fd}, nil
}

// fsHandle is an open file of fs/: its descriptor.
type fsHandle struct {
	mu sync.RWMutex // Close takes it for writing; the others for reading
	fd int          // -1 once closed; guarded by mu
}

var _ sfs.Syncer = (*fsHandle)(nil)

// Read implements sfs.Handle.Read: pread(2), read(2) where there is no
// offset (a pipe, a device).
func (h *fsHandle) Read(_ context.Context, p []byte, off int64) (int, error) {
	return h.io(p, off, unix.Pread, unix.Read)
}

// Write implements sfs.Handle.Write: pwrite(2), or write(2).
func (h *fsHandle) Write(_ context.Context, p []byte, off int64) (int, error) {
	return h.io(p, off, unix.Pwrite, unix.Write)
}

// io runs the positioned call at, or the plain one where the descriptor
// has no offset (ESPIPE), on the open descriptor.
func (h *fsHandle) io(p []byte, off int64, at func(int, []byte, int64) (int, error), plain func(int, []byte) (int, error)) (int, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return 0, syscall.EBADF
	}
	n, err := at(h.fd, p, off)
	if err == unix.ESPIPE {
		n, err = plain(h.fd, p)
	}
	return max(n, 0), err
}

// Sync implements sfs.Syncer.
func (h *fsHandle) Sync(context.Context) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.fd < 0 {
		return syscall.EBADF
	}
	return unix.Fsync(h.fd)
}

// Close implements sfs.Handle.Close.
func (h *fsHandle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
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
