package guest

import (
	"context"
	iofs "io/fs"
	"syscall"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// The fsDir operations that change the tree under a directory: create,
// mkdir, symlink, link, mknod, rename and unlink, each by one name
// relative to the directory's descriptor, never following a symbolic
// link. Modes are applied exactly (no umask); what is made belongs to
// the agent (root), as the connection's client is root and a client's
// uid and gid are not asked (chown afterwards).

// inDir runs f with an O_PATH descriptor of the directory d and the
// checked name.
func (d *fsDir) inDir(name string, f func(dirfd int) error) error {
	if err := checkName(name); err != nil {
		return err
	}
	return d.t.with(d.path, unix.O_PATH|unix.O_DIRECTORY, f)
}

// Create implements sfs.Creator: a new file, opened with flags.
func (d *fsDir) Create(_ context.Context, name string, flags sfs.OpenFlags, perm iofs.FileMode) (sfs.Node, sfs.Handle, error) {
	var (
		node sfs.Node
		ofd  = -1
	)
	err := d.inDir(name, func(dirfd int) error {
		fd, err := unix.Openat(dirfd, name, sfs.HostOpenFlags(flags)|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, sfs.UnixMode(perm)&0o7777)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err = unix.Fchmod(fd, sfs.UnixMode(perm)&0o7777); err == nil {
			err = fstat(fd, &st)
		}
		if err != nil {
			unix.Close(fd)
			unix.Unlinkat(dirfd, name, 0)
			return err
		}
		ofd, node = fd, d.t.node(d.child(name), &st)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return node, sfs.NewFDHandle(ofd), nil
}

// Mkdir implements sfs.Mkdirer.
func (d *fsDir) Mkdir(_ context.Context, name string, perm iofs.FileMode) (sfs.Node, error) {
	err := d.inDir(name, func(dirfd int) error { return unix.Mkdirat(dirfd, name, uint32(perm.Perm())) })
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err = d.t.with(d.child(name), unix.O_PATH, func(fd int) error {
		if err := fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR { // replaced meanwhile: touch nothing
			return syscall.EEXIST
		}
		if err := unix.Chmod(procPath(fd), sfs.UnixMode(perm)&0o7777); err != nil {
			return err
		}
		return fstat(fd, &st)
	})
	if err != nil {
		return nil, err
	}
	return d.t.node(d.child(name), &st), nil
}

// Remove implements sfs.Remover.
func (d *fsDir) Remove(_ context.Context, name string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return d.inDir(name, func(dirfd int) error { return unix.Unlinkat(dirfd, name, flags) })
}

// Rename implements sfs.Renamer.
func (d *fsDir) Rename(_ context.Context, oldName string, newDir sfs.Node, newName string) error {
	nd, ok := newDir.(*fsDir)
	if !ok || nd.t != d.t {
		return syscall.EXDEV
	}
	if err := checkName(newName); err != nil {
		return err
	}
	return d.inDir(oldName, func(dirfd int) error {
		return nd.t.with(nd.path, unix.O_PATH|unix.O_DIRECTORY, func(newfd int) error {
			return unix.Renameat(dirfd, oldName, newfd, newName)
		})
	})
}

// Link implements sfs.Linker.
func (d *fsDir) Link(_ context.Context, target sfs.Node, name string) error {
	var tn *fsNode
	switch t := target.(type) {
	case *fsFile:
		tn = &t.fsNode
	case *fsLink:
		tn = &t.fsNode
	case *fsDir:
		return syscall.EPERM // link(2) of a directory
	}
	if tn == nil || tn.t != d.t {
		return syscall.EXDEV
	}
	return d.inDir(name, func(dirfd int) error {
		return d.t.with(tn.path, unix.O_PATH, func(tfd int) error {
			return unix.Linkat(tfd, "", dirfd, name, unix.AT_EMPTY_PATH)
		})
	})
}

// Symlink implements sfs.Symlinker.
func (d *fsDir) Symlink(_ context.Context, target, name string) (sfs.Node, error) {
	if err := d.inDir(name, func(dirfd int) error { return unix.Symlinkat(target, dirfd, name) }); err != nil {
		return nil, err
	}
	return d.t.lookup(d.child(name))
}

// Mknod implements sfs.Mknoder.
func (d *fsDir) Mknod(_ context.Context, name string, mode iofs.FileMode, rdev uint64) (sfs.Node, error) {
	if err := d.inDir(name, func(dirfd int) error { return unix.Mknodat(dirfd, name, sfs.UnixMode(mode), int(rdev)) }); err != nil {
		return nil, err
	}
	return d.t.lookup(d.child(name))
}
