package world

import (
	"context"
	iofs "io/fs"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// The node operations that change the world. In an unsafe-rw world with
// a writer (WriteAs), each runs whole on the writer's thread, whose file
// system credentials are the owner's: the kernel checks every change of
// the lower as the owner's, and refuses (EACCES, EPERM) what the owner
// could not do, as for Apply. Elsewhere they run as called.
//
// No operation that runs on the thread asks for it again (the thread
// would wait for itself), and a caller asks before it takes any lock,
// so a lock's holder never waits for the thread unless it is the thread.

// WriteAs makes who the writer of an unsafe-rw world: its changes are
// who's from then on (see above). For another mode, or root, it does
// nothing. Call it once, before the world is served.
func (w *World) WriteAs(who cred.Cred) error {
	if w.mode != UnsafeRW || who.UID == 0 {
		return nil
	}
	t, err := startUser(who)
	if err != nil {
		return err
	}
	w.as, w.asWho = t, who
	return nil
}

// asWriter runs f as the world's writer (on its thread if it has one),
// with ctx saying the writer made the request (new entries are the
// writer's: ownerOf).
func (w *World) asWriter(ctx context.Context, f func(ctx context.Context) error) error {
	if w.as == nil {
		return f(ctx)
	}
	ctx = cred.With(ctx, w.asWho)
	return w.as.run(func() error { return f(ctx) })
}

// Create implements sfs.Creator.
func (d *Dir) Create(ctx context.Context, name string, flags sfs.OpenFlags, perm iofs.FileMode) (n sfs.Node, h sfs.Handle, err error) {
	err = d.w.asWriter(ctx, func(ctx context.Context) error {
		n, h, err = d.create(ctx, name, flags, perm)
		return err
	})
	return n, h, err
}

// Mkdir implements sfs.Mkdirer.
func (d *Dir) Mkdir(ctx context.Context, name string, perm iofs.FileMode) (n sfs.Node, err error) {
	err = d.w.asWriter(ctx, func(ctx context.Context) error {
		n, err = d.mkdir(ctx, name, perm)
		return err
	})
	return n, err
}

// Remove implements sfs.Remover.
func (d *Dir) Remove(ctx context.Context, name string, dir bool) error {
	return d.w.asWriter(ctx, func(ctx context.Context) error { return d.remove(ctx, name, dir) })
}

// Rename implements sfs.Renamer.
func (d *Dir) Rename(ctx context.Context, oldName string, newDir sfs.Node, newName string) error {
	return d.w.asWriter(ctx, func(ctx context.Context) error { return d.renameTo(ctx, oldName, newDir, newName) })
}

// Link implements sfs.Linker.
func (d *Dir) Link(ctx context.Context, target sfs.Node, name string) error {
	return d.w.asWriter(ctx, func(ctx context.Context) error { return d.link(ctx, target, name) })
}

// Symlink implements sfs.Symlinker.
func (d *Dir) Symlink(ctx context.Context, target, name string) (n sfs.Node, err error) {
	err = d.w.asWriter(ctx, func(ctx context.Context) error {
		n, err = d.symlink(ctx, target, name)
		return err
	})
	return n, err
}

// Truncate implements sfs.Truncater.
func (f *File) Truncate(ctx context.Context, size int64) error {
	return f.w.asWriter(ctx, func(ctx context.Context) error { return f.truncate(ctx, size) })
}

// SetAttr implements sfs.Setattrer.
func (n *node) SetAttr(ctx context.Context, c sfs.Change) error {
	return n.w.asWriter(ctx, func(ctx context.Context) error { return n.setAttr(ctx, c) })
}

// Open implements sfs.Opener: an open for writing (or O_TRUNC) is a
// change; reads are opened as called.
func (f *File) Open(ctx context.Context, flags sfs.OpenFlags) (h sfs.Handle, err error) {
	of := sfs.HostOpenFlags(flags)
	if of&unix.O_ACCMODE == unix.O_RDONLY && of&unix.O_TRUNC == 0 {
		return f.open(ctx, flags)
	}
	err = f.w.asWriter(ctx, func(ctx context.Context) error {
		h, err = f.open(ctx, flags)
		return err
	})
	return h, err
}
