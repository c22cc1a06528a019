package fs

import (
	"context"
	iofs "io/fs"
	"syscall"
	"time"

	"sandfs/ctl/cred"
)

// Chan's side of posix.go's operations, checked as the kernel checks
// them (linux fs/namei.c may_create, may_delete; fs/attr.c
// setattr_prepare).

// Rename moves oldName in c to newName in newDir (c a Renamer; EPERM
// elsewhere). It needs write and search on both directories.
func (c Chan) Rename(ctx context.Context, oldName string, newDir Chan, newName string) error {
	d, err := c.dir(ctx, MayWrite|MayExec)
	if err != nil {
		return err
	}
	if _, err := newDir.dir(ctx, MayWrite|MayExec); err != nil {
		return err
	}
	r, ok := d.(Renamer)
	if !ok {
		return syscall.EPERM
	}
	return r.Rename(ctx, oldName, newDir.node, newName)
}

// Link makes name in c a link to target (c a Linker; EPERM elsewhere).
// It needs write and search on c.
func (c Chan) Link(ctx context.Context, target Chan, name string) error {
	d, err := c.dir(ctx, MayWrite|MayExec)
	if err != nil {
		return err
	}
	l, ok := d.(Linker)
	if !ok {
		return syscall.EPERM
	}
	return l.Link(ctx, target.node, name)
}

// Symlink makes name in c a symbolic link to target (c a Symlinker;
// EPERM elsewhere). It needs write and search on c.
func (c Chan) Symlink(ctx context.Context, target, name string) (Chan, error) {
	return makeIn(ctx, c, func(d Symlinker) (Node, error) { return d.Symlink(ctx, target, name) })
}

// Mknod makes the special file name in c (c a Mknoder; EPERM
// elsewhere). It needs write and search on c.
func (c Chan) Mknod(ctx context.Context, name string, mode iofs.FileMode, rdev uint64) (Chan, error) {
	return makeIn(ctx, c, func(d Mknoder) (Node, error) { return d.Mknod(ctx, name, mode, rdev) })
}

// Readlink returns the text of the symbolic link c (EINVAL if it is
// none, as readlink(2)).
func (c Chan) Readlink(ctx context.Context) (string, error) {
	r, ok := c.node.(Readlinker)
	if !ok {
		return "", syscall.EINVAL
	}
	return r.Readlink(ctx)
}

// StatFS describes the file system c is on (ENOSYS for a node that is
// not on one: the adapters then describe the tree themselves).
func (c Chan) StatFS(ctx context.Context) (FSStat, error) {
	s, ok := c.node.(StatFSer)
	if !ok {
		return FSStat{}, syscall.ENOSYS
	}
	return s.StatFS(ctx)
}

// SetAttr changes c's mode, owner or times (c a Setattrer; EPERM
// elsewhere). As setattr_prepare decides: the mode and explicit times
// only by the owner or the privileged, the owner only by the
// privileged, the times to now also by anyone who may write.
func (c Chan) SetAttr(ctx context.Context, ch Change) error {
	s, ok := c.node.(Setattrer)
	if !ok {
		return syscall.EPERM
	}
	who := cred.Of(ctx)
	owner := who.Privileged() || c.attr.Owner != nil && who.UID == c.attr.Owner.UID
	switch {
	case (ch.UID != nil || ch.GID != nil) && !who.Privileged():
		return syscall.EPERM
	case ch.Mode != nil && !owner:
		return syscall.EPERM
	case (explicit(ch.Atime) || explicit(ch.Mtime)) && !owner:
		return syscall.EPERM
	case (ch.Atime != nil || ch.Mtime != nil) && !owner:
		if err := c.Check(ctx, MayWrite); err != nil {
			return err
		}
	}
	return s.SetAttr(ctx, ch)
}

// explicit reports whether a Change time names a time rather than "now".
func explicit(t *time.Time) bool {
	return t != nil && !t.IsZero()
}
