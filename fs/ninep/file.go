package ninep

import (
	iofs "io/fs"
	"path"
	"sync"
	"time"

	"github.com/hugelgupf/p9/fsimpl/readdir"
	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	sfs "sandfs/fs"
)

// iounit is the largest read or write the server asks clients to send:
// small, since ctl messages are at most 4 KiB and generated text is short
// (p9 fsimpl/staticfs uses 4096 too).
const iounit = 64 << 10

// file is one fid's view of a tree node: Walk returns a fresh file for
// every fid (p9 composefs), and Open gives it its own handle. Its Chan
// checks the connection's identity (conn.ctx) against the modes shown
// on every walk, open, listing, create, remove and truncation.
//
// Concurrency (as p9.File): Walk, GetAttr, Readdir may run concurrently
// with each other; ReadAt and WriteAt may run concurrently with each
// other after Open; Close is called once, after every other call has
// returned.
type file struct {
	templatefs.NotSymlinkFile
	templatefs.XattrUnimplemented
	templatefs.NoopRenamed
	templatefs.NotLockable

	c    *conn
	path string   // tree path, "" for the root
	ch   sfs.Chan // the node, with the owner it shows

	mu sync.Mutex // protects h
	h  sfs.Handle // set by Open
}

var _ p9.File = (*file)(nil)

// errno converts a tree error to the errno p9 sends in Rlerror.
func errno(err error) error {
	if err == nil {
		return nil
	}
	return linux.Errno(msg.Errno(err))
}

func (f *file) qid(a sfs.Attr) p9.QID {
	t := p9.TypeRegular
	if a.Mode.IsDir() {
		t = p9.TypeDir
	}
	return p9.QID{Type: t, Path: f.c.srv.qidPath(f.path)}
}

// Walk implements p9.File.Walk; p9 calls it with zero or one name.
func (f *file) Walk(names []string) ([]p9.QID, p9.File, error) {
	var qs []p9.QID
	cur := &file{c: f.c, path: f.path, ch: f.ch}
	for _, name := range names {
		ch, err := cur.ch.Walk(f.c.ctx, name)
		if err != nil {
			return nil, nil, errno(err)
		}
		cur = &file{c: f.c, path: path.Join(cur.path, name), ch: ch}
		qs = append(qs, cur.qid(ch.Attr()))
	}
	return qs, cur, nil
}

// WalkGetAttr implements p9.File.WalkGetAttr: the attributes are those
// the walk saw (the Chan's), not a second Stat, which would cost a remote
// node another round trip to its server. p9 walks with it one element
// at a time.
func (f *file) WalkGetAttr(names []string) ([]p9.QID, p9.File, p9.AttrMask, p9.Attr, error) {
	qs, nf, err := f.Walk(names)
	if err != nil {
		return nil, nil, p9.AttrMask{}, p9.Attr{}, err
	}
	return qs, nf, p9.AttrMaskAll, toP9Attr(nf.(*file).ch.Attr()), nil
}

// StatFS implements p9.File.StatFS.
func (f *file) StatFS() (p9.FSStat, error) {
	return p9.FSStat{Type: 0x01021997 /* V9FS_MAGIC */, BlockSize: 4096, NameLength: 255}, nil
}

// GetAttr implements p9.File.GetAttr.
func (f *file) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	a, err := f.ch.Stat(f.c.ctx)
	if err != nil {
		return p9.QID{}, p9.AttrMask{}, p9.Attr{}, errno(err)
	}
	return f.qid(a), p9.AttrMaskAll, toP9Attr(a), nil
}

// started is the time shown for nodes without an mtime.
var started = time.Now()

func toP9Attr(a sfs.Attr) p9.Attr {
	mode := p9.ModeRegular
	nlink := p9.NLink(1)
	if a.Mode.IsDir() {
		mode, nlink = p9.ModeDirectory, 2
	}
	t := a.Mtime
	if t.IsZero() {
		t = started
	}
	sec, nsec := uint64(t.Unix()), uint64(t.Nanosecond())
	var o cred.Owner
	if a.Owner != nil {
		o = *a.Owner
	}
	return p9.Attr{
		Mode:         mode | p9.FileMode(a.Mode.Perm()),
		UID:          p9.UID(o.UID),
		GID:          p9.GID(o.GID),
		NLink:        nlink,
		Size:         uint64(a.Size),
		BlockSize:    4096,
		ATimeSeconds: sec, ATimeNanoSeconds: nsec,
		MTimeSeconds: sec, MTimeNanoSeconds: nsec,
		CTimeSeconds: sec, CTimeNanoSeconds: nsec,
	}
}

// SetAttr implements p9.File.SetAttr. A size change goes to
// Chan.Truncate (truncation to 0 of a message file is accepted and
// ignored, as `echo msg > file` asks for it); a directory's is EPERM.
// Time changes are ignored; mode and owner changes are EPERM.
func (f *file) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	if valid.Permissions || valid.UID || valid.GID {
		return linux.EPERM
	}
	if !valid.Size {
		return nil // times only: ignored
	}
	if f.ch.IsDir() {
		return linux.EPERM
	}
	return errno(f.ch.Truncate(f.c.ctx, int64(attr.Size)))
}

// Open implements p9.File.Open. A directory needs read, a file what the
// mode asks (Chan.Open).
//
// The qid comes from the attributes seen at the walk (a node's type does
// not change): a fresh Stat would cost a remote node a round trip to its
// server on every open.
func (f *file) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	a := f.ch.Attr()
	if f.ch.IsDir() {
		if mode.Mode() != p9.ReadOnly {
			return p9.QID{}, 0, linux.EISDIR
		}
		if err := f.ch.Check(f.c.ctx, sfs.MayRead); err != nil {
			return p9.QID{}, 0, errno(err)
		}
		return f.qid(a), iounit, nil
	}
	h, err := f.ch.Open(f.c.ctx, sfs.OpenFlags(mode.OSFlags()))
	if err != nil {
		return p9.QID{}, 0, errno(err)
	}
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
	return f.qid(a), iounit, nil
}

func (f *file) handle() sfs.Handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

// ReadAt implements p9.File.ReadAt. It runs under a context that ends
// when the client flushes or clunks the read or the connection ends.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	h := f.handle()
	if h == nil {
		return 0, linux.EBADF
	}
	ctx, done := f.c.startRead(f.path)
	defer done()
	n, err := h.Read(ctx, p, off)
	return n, errno(err)
}

// WriteAt implements p9.File.WriteAt.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	h := f.handle()
	if h == nil {
		return 0, linux.EBADF
	}
	n, err := h.Write(f.c.ctx, p, off)
	return n, errno(err)
}

// Close implements p9.File.Close: it closes the open handle, if any.
func (f *file) Close() error {
	f.mu.Lock()
	h := f.h
	f.h = nil
	f.mu.Unlock()
	if h != nil {
		return errno(h.Close())
	}
	return nil
}

// FSync implements p9.File.FSync.
func (f *file) FSync() error { return nil }

// Readdir implements p9.File.Readdir.
func (f *file) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	ents, err := f.ch.List(f.c.ctx)
	if err != nil {
		return nil, errno(err)
	}
	names := make([]string, len(ents))
	qs := make(map[string]p9.QID, len(ents))
	for i, e := range ents {
		names[i] = e.Name
		t := p9.TypeRegular
		if e.Mode&iofs.ModeDir != 0 {
			t = p9.TypeDir
		}
		qs[e.Name] = p9.QID{Type: t, Path: f.c.srv.qidPath(path.Join(f.path, e.Name))}
	}
	return readdir.Readdir(offset, count, names, qs)
}

// The tree has no create, link, rename or remove: EPERM in a directory,
// ENOTDIR elsewhere.

func (f *file) dirErr() error {
	if f.ch.IsDir() {
		return linux.EPERM
	}
	return linux.ENOTDIR
}

// Create implements p9.File.Create in an sfs.Creator directory (a
// guest's fs/): f becomes the new file, open (p9 semantics).
// The uid and gid a client gives are ignored: what it makes belongs to
// the owner of the directory it is made in.
func (f *file) Create(name string, mode p9.OpenFlags, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.File, p9.QID, uint32, error) {
	if !f.ch.IsDir() {
		return nil, p9.QID{}, 0, f.dirErr()
	}
	ch, h, err := f.ch.Create(f.c.ctx, name, sfs.OpenFlags(mode.OSFlags()), iofs.FileMode(perm.Permissions()))
	if err != nil {
		return nil, p9.QID{}, 0, errno(err)
	}
	nf := &file{c: f.c, path: path.Join(f.path, name), ch: ch, h: h}
	return nf, nf.qid(ch.Attr()), iounit, nil
}

// Mkdir implements p9.File.Mkdir in an sfs.Mkdirer directory.
func (f *file) Mkdir(name string, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.QID, error) {
	if !f.ch.IsDir() {
		return p9.QID{}, f.dirErr()
	}
	if _, err := f.ch.Mkdir(f.c.ctx, name, iofs.FileMode(perm.Permissions())); err != nil {
		return p9.QID{}, errno(err)
	}
	return p9.QID{Type: p9.TypeDir, Path: f.c.srv.qidPath(path.Join(f.path, name))}, nil
}

// Symlink implements p9.File.Symlink.
func (f *file) Symlink(string, string, p9.UID, p9.GID) (p9.QID, error) {
	return p9.QID{}, f.dirErr()
}

// Link implements p9.File.Link.
func (f *file) Link(p9.File, string) error { return f.dirErr() }

// Mknod implements p9.File.Mknod.
func (f *file) Mknod(string, p9.FileMode, uint32, uint32, p9.UID, p9.GID) (p9.QID, error) {
	return p9.QID{}, f.dirErr()
}

// Rename implements p9.File.Rename.
func (f *file) Rename(p9.File, string) error { return linux.EPERM }

// RenameAt implements p9.File.RenameAt.
func (f *file) RenameAt(string, p9.File, string) error { return f.dirErr() }

// UnlinkAt implements p9.File.UnlinkAt in an sfs.Remover directory.
func (f *file) UnlinkAt(name string, flags uint32) error {
	if !f.ch.IsDir() {
		return f.dirErr()
	}
	return errno(f.ch.Remove(f.c.ctx, name, flags&unix.AT_REMOVEDIR != 0))
}

// gate is the attach point of a connection that must name the token: its
// only child is the token, which is the tree root. p9 walks the attach
// name from it, so attaching with the token gives the root and anything
// else fails with EPERM.
type gate struct {
	p9.DefaultWalkGetAttr
	templatefs.ReadOnlyDir
	templatefs.NilCloser

	c    *conn
	root *file
}

var _ p9.File = (*gate)(nil)

// Walk implements p9.File.Walk.
func (g *gate) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 1 && g.c.tokenIs(names[0]) {
		q, _, _, err := g.root.GetAttr(p9.AttrMaskAll)
		if err != nil {
			return nil, nil, err
		}
		g.c.authenticated()
		return []p9.QID{q}, g.root, nil
	}
	g.c.srv.log.Warn("9p: attach refused: wrong token", "remote", g.c.remote)
	return nil, nil, linux.EPERM
}

// GetAttr implements p9.File.GetAttr.
func (g *gate) GetAttr(p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	return p9.QID{Type: p9.TypeDir, Path: 0}, p9.AttrMaskAll, p9.Attr{Mode: p9.ModeDirectory, NLink: 2}, nil
}

// StatFS implements p9.File.StatFS.
func (g *gate) StatFS() (p9.FSStat, error) { return p9.FSStat{}, linux.EPERM }

// Open implements p9.File.Open.
func (g *gate) Open(p9.OpenFlags) (p9.QID, uint32, error) { return p9.QID{}, 0, linux.EPERM }

// Readdir implements p9.File.Readdir.
func (g *gate) Readdir(uint64, uint32) (p9.Dirents, error) { return nil, linux.EPERM }
