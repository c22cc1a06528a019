package fs

import (
	"context"
	iofs "io/fs"
	"syscall"

	"sandfs/ctl/cred"
)

// Access is what a request asks of a node: the bits of access(2).
type Access uint32

// Access bits, as R_OK, W_OK and X_OK (search, for a directory).
const (
	MayExec  Access = 1
	MayWrite Access = 2
	MayRead  Access = 4
)

// errPerm is the refusal of an access the modes do not give (EACCES, as
// the kernel's).
var errPerm error = syscall.EACCES

// Permits reports whether c may have access want to a node showing
// attributes a (a.Owner set), as generic_permission (linux
// fs/namei.c) decides: the privileged (root, the daemon's user) may do
// anything; the owner gets the owner bits, a member of the node's group
// the group bits, anyone else the other bits.
func Permits(c cred.Cred, a Attr, want Access) bool {
	var o cred.Owner
	if a.Owner != nil {
		o = *a.Owner
	}
	return c.Permits(o, uint32(a.Mode.Perm()), uint32(want))
}

// Chan is a node reached from a root by a transport, the thing a FUSE
// inode or a 9P fid holds (Plan 9's Chan, 9front port/chan.c: what a walk
// found, with what was learned on the way). It knows the owner the node
// shows: the node's own, or else the owner of the directory it was found
// in, so a sandbox's files are its owner's down to the guest's files.
//
// Chan's methods are how the adapters use nodes, and they are the one
// place access is checked, for every transport alike: each takes the
// caller from ctx (cred.Of: the FUSE caller, the 9P connection's
// peer or token) and checks it with Permits against the attributes the
// Chan saw when it was made, before it calls the node. In-process callers
// that use nodes directly (Walk, Open) check nothing.
type Chan struct {
	node   Node
	parent cred.Owner // the owner of the directory the node was found in
	attr   Attr       // as seen when the Chan was made; Owner set
}

// NewChan returns the Chan of root, a tree's root. A root that shows no
// owner belongs to def (for a remote tree, the user who mounts it).
func NewChan(ctx context.Context, root Node, def cred.Owner) (Chan, error) {
	return newChan(ctx, root, def)
}

func newChan(ctx context.Context, n Node, parent cred.Owner) (Chan, error) {
	c := Chan{node: n, parent: parent}
	a, err := c.Stat(ctx)
	if err != nil {
		return Chan{}, err
	}
	c.attr = a
	return c, nil
}

// Node returns the node.
func (c Chan) Node() Node { return c.node }

// Attr returns the attributes seen when c was made (Owner set).
func (c Chan) Attr() Attr { return c.attr }

// IsDir reports whether the node is a directory.
func (c Chan) IsDir() bool {
	_, ok := c.node.(Dir)
	return ok
}

// Stat returns the node's current attributes, Owner filled in.
func (c Chan) Stat(ctx context.Context) (Attr, error) {
	a, err := c.node.Stat(ctx)
	if err != nil {
		return Attr{}, err
	}
	if a.Owner == nil {
		o := c.parent
		a.Owner = &o
	}
	return a, nil
}

// Refresh returns c with its attributes stated again (a getattr): later
// checks use them.
func (c Chan) Refresh(ctx context.Context) (Chan, error) {
	a, err := c.Stat(ctx)
	if err != nil {
		return c, err
	}
	c.attr = a
	return c, nil
}

// Check returns EACCES unless ctx's caller may have access want to c.
func (c Chan) Check(ctx context.Context, want Access) error {
	if !Permits(cred.Of(ctx), c.attr, want) {
		return errPerm
	}
	return nil
}

// dir returns c's node as a Dir after checking want on it.
func (c Chan) dir(ctx context.Context, want Access) (Dir, error) {
	d, ok := c.node.(Dir)
	if !ok {
		return nil, syscall.ENOTDIR
	}
	return d, c.Check(ctx, want)
}

// Walk returns the Chan of c's child name. It needs search (x) on c.
func (c Chan) Walk(ctx context.Context, name string) (Chan, error) {
	d, err := c.dir(ctx, MayExec)
	if err != nil {
		return Chan{}, err
	}
	n, err := d.Lookup(ctx, name)
	if err != nil {
		return Chan{}, err
	}
	return newChan(ctx, n, *c.attr.Owner)
}

// List lists the directory. It needs read on c.
func (c Chan) List(ctx context.Context) ([]Dirent, error) {
	d, err := c.dir(ctx, MayRead)
	if err != nil {
		return nil, err
	}
	return d.List(ctx)
}

// Open opens the file (Open) for flags. It needs read, write or both on
// c, as flags ask. A directory is EISDIR: the adapters open directories
// themselves, after Check(ctx, MayRead).
func (c Chan) Open(ctx context.Context, flags OpenFlags) (Handle, error) {
	if c.IsDir() {
		return nil, syscall.EISDIR
	}
	var want Access
	if flags.Readable() {
		want |= MayRead
	}
	if flags.Writable() {
		want |= MayWrite
	}
	if err := c.Check(ctx, want); err != nil {
		return nil, err
	}
	return Open(ctx, c.node, flags)
}

// Create creates and opens the file name in c (a Creator; EPERM
// elsewhere). It needs write and search on c.
func (c Chan) Create(ctx context.Context, name string, flags OpenFlags, perm iofs.FileMode) (Chan, Handle, error) {
	d, err := c.dir(ctx, MayWrite|MayExec)
	if err != nil {
		return Chan{}, nil, err
	}
	cr, ok := d.(Creator)
	if !ok {
		return Chan{}, nil, syscall.EPERM
	}
	n, h, err := cr.Create(ctx, name, flags, perm)
	if err != nil {
		return Chan{}, nil, err
	}
	nc, err := newChan(ctx, n, *c.attr.Owner)
	if err != nil {
		h.Close()
		return Chan{}, nil, err
	}
	return nc, h, nil
}

// Mkdir makes the directory name in c (a Mkdirer; EPERM elsewhere). It
// needs write and search on c.
func (c Chan) Mkdir(ctx context.Context, name string, perm iofs.FileMode) (Chan, error) {
	return makeIn(ctx, c, func(d Mkdirer) (Node, error) { return d.Mkdir(ctx, name, perm) })
}

// makeIn makes a node in directory c with mk, when c's node is an I
// (EPERM otherwise), and returns its Chan. It needs write and search on
// c, as linux may_create does.
func makeIn[I any](ctx context.Context, c Chan, mk func(I) (Node, error)) (Chan, error) {
	d, err := c.dir(ctx, MayWrite|MayExec)
	if err != nil {
		return Chan{}, err
	}
	i, ok := d.(I)
	if !ok {
		return Chan{}, syscall.EPERM
	}
	n, err := mk(i)
	if err != nil {
		return Chan{}, err
	}
	return newChan(ctx, n, *c.attr.Owner)
}

// Remove removes name from c (a Remover; EPERM elsewhere), the empty
// directory name when dir is set. It needs write and search on c.
func (c Chan) Remove(ctx context.Context, name string, dir bool) error {
	d, err := c.dir(ctx, MayWrite|MayExec)
	if err != nil {
		return err
	}
	rm, ok := d.(Remover)
	if !ok {
		return syscall.EPERM
	}
	return rm.Remove(ctx, name, dir)
}

// Truncate sets the file's size. It needs write on c. A node that is not
// a Truncater refuses sizes other than 0 (EPERM); a file accepts
// truncation to 0 and ignores it (what `echo msg > file` asks of a
// message file), a directory refuses it (EISDIR).
func (c Chan) Truncate(ctx context.Context, size int64) error {
	if err := c.Check(ctx, MayWrite); err != nil {
		return err
	}
	if t, ok := c.node.(Truncater); ok {
		return t.Truncate(ctx, size)
	}
	if size != 0 {
		return syscall.EPERM
	}
	if c.IsDir() {
		return syscall.EISDIR
	}
	return nil
}
