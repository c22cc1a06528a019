package ninep

import (
	iofs "io/fs"
	"time"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// The changes a client makes to the tree (create, mkdir, symlink, link,
// mknod, rename, remove, setattr), each on the node's optional sfs
// interface. A node without it refuses (dirErr).

// dirErr is the refusal of a change the node does not support: EPERM in
// a directory, ENOTDIR elsewhere.
func (f *file) dirErr() error {
	if f.ch.IsDir() {
		return linux.EPERM
	}
	return linux.ENOTDIR
}

// Create implements p9.File.Create in an sfs.Creator directory (a
// guest's fs/): f becomes the new file, open (p9 semantics).
// The uid and gid a client gives are ignored unless the client is
// privileged and the new node an sfs.Setattrer (see chownNew): what it
// makes belongs to the owner of the directory it is made in, or to
// whoever the tree says made it.
func (f *file) Create(name string, mode p9.OpenFlags, perm p9.FileMode, uid p9.UID, gid p9.GID) (p9.File, p9.QID, uint32, error) {
	if !f.ch.IsDir() {
		return nil, p9.QID{}, 0, f.dirErr()
	}
	ch, h, err := f.ch.Create(f.c.ctx, name, openFlags(mode), fromP9Mode(perm)&^iofs.ModeType)
	if err != nil {
		return nil, p9.QID{}, 0, errno(err)
	}
	if ch, err = f.chownNew(ch, uid, gid); err != nil {
		h.Close()
		return nil, p9.QID{}, 0, errno(err)
	}
	nf := f.child(name, ch, h)
	return nf, nf.qid(ch.Attr()), f.c.offerFile(h, f.c.srv.ioUnit), nil
}

// chownNew gives ch, just made, the owner a privileged client asked for
// (as a chown would), if its node is an sfs.Setattrer; anyone else's
// uid and gid are ignored, and so are ids the server's IDMap does not
// map. It returns ch stated again.
func (f *file) chownNew(ch sfs.Chan, uid p9.UID, gid p9.GID) (sfs.Chan, error) {
	uid, _ = f.c.srv.ids.uid(uid)
	gid, _ = f.c.srv.ids.gid(gid)
	if _, ok := ch.Node().(sfs.Setattrer); !ok || !cred.Of(f.c.ctx).Privileged() || !uid.Ok() && !gid.Ok() {
		return ch, nil
	}
	var c sfs.Change
	if uid.Ok() {
		u := uint32(uid)
		c.UID = &u
	}
	if gid.Ok() {
		g := uint32(gid)
		c.GID = &g
	}
	if err := ch.SetAttr(f.c.ctx, c); err != nil {
		return ch, err
	}
	return ch.Refresh(f.c.ctx)
}

// Mkdir implements p9.File.Mkdir in an sfs.Mkdirer directory; the uid
// and gid as Create's.
func (f *file) Mkdir(name string, perm p9.FileMode, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if !f.ch.IsDir() {
		return p9.QID{}, f.dirErr()
	}
	ch, err := f.ch.Mkdir(f.c.ctx, name, fromP9Mode(perm)&^iofs.ModeType)
	if err == nil {
		ch, err = f.chownNew(ch, uid, gid)
	}
	if err != nil {
		return p9.QID{}, errno(err)
	}
	return f.childQID(name, ch), nil
}

// childQID is the QID of ch, just made as name in f.
func (f *file) childQID(name string, ch sfs.Chan) p9.QID {
	return f.child(name, ch, nil).qid(ch.Attr())
}

// Symlink implements p9.File.Symlink in an sfs.Symlinker directory; the
// uid and gid as Create's.
func (f *file) Symlink(target, name string, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if !f.ch.IsDir() {
		return p9.QID{}, f.dirErr()
	}
	ch, err := f.ch.Symlink(f.c.ctx, target, name)
	if err == nil {
		ch, err = f.chownNew(ch, uid, gid)
	}
	if err != nil {
		return p9.QID{}, errno(err)
	}
	return f.childQID(name, ch), nil
}

// Link implements p9.File.Link in an sfs.Linker directory.
func (f *file) Link(target p9.File, name string) error {
	if !f.ch.IsDir() {
		return f.dirErr()
	}
	t, ok := target.(*file)
	if !ok || t.c != f.c {
		return linux.EXDEV
	}
	return errno(f.ch.Link(f.c.ctx, t.ch, name))
}

// Mknod implements p9.File.Mknod in an sfs.Mknoder directory; the uid
// and gid as Create's.
func (f *file) Mknod(name string, mode p9.FileMode, major, minor uint32, uid p9.UID, gid p9.GID) (p9.QID, error) {
	if !f.ch.IsDir() {
		return p9.QID{}, f.dirErr()
	}
	ch, err := f.ch.Mknod(f.c.ctx, name, fromP9Mode(mode), unix.Mkdev(major, minor))
	if err == nil {
		ch, err = f.chownNew(ch, uid, gid)
	}
	if err != nil {
		return p9.QID{}, errno(err)
	}
	return f.childQID(name, ch), nil
}

// Readlink implements p9.File.Readlink of an sfs.Readlinker.
func (f *file) Readlink() (string, error) {
	s, err := f.ch.Readlink(f.c.ctx)
	return s, errno(err)
}

// Rename implements p9.File.Rename (Trename; Linux sends Trenameat).
func (f *file) Rename(p9.File, string) error { return linux.EPERM }

// RenameAt implements p9.File.RenameAt in an sfs.Renamer directory.
func (f *file) RenameAt(oldName string, newDir p9.File, newName string) error {
	if !f.ch.IsDir() {
		return f.dirErr()
	}
	d, ok := newDir.(*file)
	if !ok || d.c != f.c {
		return linux.EXDEV
	}
	return errno(f.ch.Rename(f.c.ctx, oldName, d.ch, newName))
}

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

// SetAttr implements p9.File.SetAttr. A size change goes to
// Chan.Truncate (truncation to 0 of a message file is accepted and
// ignored, as `echo msg > file` asks for it); a directory's is EPERM.
// Mode, owner and time changes go to Chan.SetAttr on an sfs.Setattrer
// (a guest's fs/); elsewhere time changes are ignored and mode and owner
// changes are EPERM.
func (f *file) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	_, canSet := f.ch.Node().(sfs.Setattrer)
	if !canSet && (valid.Permissions || valid.UID || valid.GID) {
		return linux.EPERM
	}
	var ok bool
	if attr.UID, ok = f.c.srv.ids.uid(attr.UID); valid.UID && !ok {
		return linux.EPERM // an id the server's IDMap does not map
	}
	if attr.GID, ok = f.c.srv.ids.gid(attr.GID); valid.GID && !ok {
		return linux.EPERM
	}
	if valid.Size {
		if f.ch.IsDir() {
			return linux.EPERM
		}
		if err := f.ch.Truncate(f.c.ctx, int64(attr.Size)); err != nil {
			return errno(err)
		}
	}
	if !canSet {
		return nil // times only: ignored
	}
	ch := toChange(valid, attr)
	if ch == (sfs.Change{}) {
		return nil
	}
	return errno(f.ch.SetAttr(f.c.ctx, ch))
}

// toChange is the sfs.Change of a Tsetattr (size aside).
func toChange(valid p9.SetAttrMask, attr p9.SetAttr) sfs.Change {
	var ch sfs.Change
	if valid.Permissions {
		m := fromP9Mode(attr.Permissions) &^ iofs.ModeType
		ch.Mode = &m
	}
	if valid.UID {
		u := uint32(attr.UID)
		ch.UID = &u
	}
	if valid.GID {
		g := uint32(attr.GID)
		ch.GID = &g
	}
	setTime := func(set, explicit bool, sec, nsec uint64) *time.Time {
		if !set {
			return nil
		}
		var t time.Time // the zero time: now
		if explicit {
			t = time.Unix(int64(sec), int64(nsec))
		}
		return &t
	}
	ch.Atime = setTime(valid.ATime, valid.ATimeNotSystemTime, attr.ATimeSeconds, attr.ATimeNanoSeconds)
	ch.Mtime = setTime(valid.MTime, valid.MTimeNotSystemTime, attr.MTimeSeconds, attr.MTimeNanoSeconds)
	return ch
}
