package guest

import (
	"context"

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
	return n.t.with(n.path, unix.O_PATH, func(fd int) error { return sfs.SetAttrFD(fd, c) })
}
