package guest

import (
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// The fsFile operations that change the tree under a directory: create,
// mkdir, symlink, link, mknod, rename and unlink, each by one name
// relative to the directory's descriptor, never following a symlink.

// chownAt sets the owner the client asked for, if any, without following.
func chownAt(dirfd int, name string, uid p9.UID, gid p9.GID) error {
	u, g := -1, -1
	if uid.Ok() {
		u = int(uid)
	}
	if gid.Ok() {
		g = int(gid)
	}
	if u < 0 && g < 0 {
		return nil
	}
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	return unix.Fchownat(dirfd, name, u, g, flags)
}

// Create implements p9.File.Create: a new regular file, opened. The mode
// is applied exactly (no umask), and the owner is the client's uid/gid.
func (f *fsFile) Create(name string, mode p9.OpenFlags, perm p9.FileMode, uid p9.UID, gid p9.GID) (p9.File, p9.QID, uint32, error) {
	if err := checkName(name); err != nil {
		return nil, p9.QID{}, 0, err
	}
	flags := openFlags(mode) | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY
	ofd, err := unix.Openat(f.fd, name, flags, uint32(perm&0o7777))
	if err != nil {
		return nil, p9.QID{}, 0, sysErr(err)
	}
	fail := func(err error) (p9.File, p9.QID, uint32, error) {
		unix.Close(ofd)
		unix.Unlinkat(f.fd, name, 0)
		return nil, p9.QID{}, 0, sysErr(err)
	}
	if err := unix.Fchmod(ofd, uint32(perm&0o7777)); err != nil {
		return fail(err)
	}
	if err := chownAt(ofd, "", uid, gid); err != nil {
		return fail(err)
	}
	pfd, err := unix.Openat(unix.AT_FDCWD, procPath(ofd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	n, err := newFSFile(f.c, pfd)
	if err != nil {
		return fail(err)
	}
	n.ofd = ofd
	return n, n.qid, 0, nil
}

// Mkdir implements p9.File.Mkdir.
func (f *fsFile) Mkdir(name string, perm p9.FileMode, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if err := checkName(name); err != nil {
		return p9.QID{}, err
	}
	if err := unix.Mkdirat(f.fd, name, uint32(perm&0o7777)); err != nil {
		return p9.QID{}, sysErr(err)
	}
	n, err := f.child(name)
	if err != nil {
		return p9.QID{}, err
	}
	defer n.Close()
	if n.qid.Type&p9.TypeDir == 0 { // replaced meanwhile: touch nothing
		return p9.QID{}, linux.EEXIST
	}
	if err := unix.Chmod(procPath(n.fd), uint32(perm&0o7777)); err != nil {
		return p9.QID{}, sysErr(err)
	}
	if err := chownAt(n.fd, "", uid, gid); err != nil {
		return p9.QID{}, sysErr(err)
	}
	return n.qid, nil
}

// Symlink implements p9.File.Symlink: newName in this directory, pointing
// at oldName (stored as given, never resolved).
func (f *fsFile) Symlink(oldName, newName string, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if err := checkName(newName); err != nil {
		return p9.QID{}, err
	}
	if err := unix.Symlinkat(oldName, f.fd, newName); err != nil {
		return p9.QID{}, sysErr(err)
	}
	return f.chownNew(newName, uid, gid)
}

// chownNew gives the entry name, just made in this directory, the
// client's owner and returns its QID.
func (f *fsFile) chownNew(name string, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if err := chownAt(f.fd, name, uid, gid); err != nil {
		return p9.QID{}, sysErr(err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(f.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return p9.QID{}, sysErr(err)
	}
	return qidOf(&st), nil
}

// Link implements p9.File.Link.
func (f *fsFile) Link(target p9.File, newName string) error {
	if err := checkName(newName); err != nil {
		return err
	}
	t, ok := target.(*fsFile)
	if !ok {
		return linux.EXDEV
	}
	return sysErr(unix.Linkat(t.fd, "", f.fd, newName, unix.AT_EMPTY_PATH))
}

// Mknod implements p9.File.Mknod.
func (f *fsFile) Mknod(name string, mode p9.FileMode, major, minor uint32, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if err := checkName(name); err != nil {
		return p9.QID{}, err
	}
	if err := unix.Mknodat(f.fd, name, uint32(mode), int(unix.Mkdev(major, minor))); err != nil {
		return p9.QID{}, sysErr(err)
	}
	return f.chownNew(name, uid, gid)
}

// Rename implements p9.File.Rename (never called by the server).
func (f *fsFile) Rename(p9.File, string) error { return linux.ENOSYS }

// RenameAt implements p9.File.RenameAt.
func (f *fsFile) RenameAt(oldName string, newDir p9.File, newName string) error {
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	d, ok := newDir.(*fsFile)
	if !ok {
		return linux.EXDEV
	}
	return sysErr(unix.Renameat(f.fd, oldName, d.fd, newName))
}

// UnlinkAt implements p9.File.UnlinkAt; flags may be AT_REMOVEDIR.
func (f *fsFile) UnlinkAt(name string, flags uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	return sysErr(unix.Unlinkat(f.fd, name, int(flags)&unix.AT_REMOVEDIR))
}
