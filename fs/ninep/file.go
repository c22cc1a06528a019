package ninep

import (
	"errors"
	iofs "io/fs"
	"path"
	"sync"
	"syscall"
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
	templatefs.XattrUnimplemented
	templatefs.NoopRenamed
	templatefs.NotLockable

	c    *conn
	path string   // tree path, "" for the root
	ch   sfs.Chan // the node, with the owner it shows

	mu   sync.Mutex   // protects h and ents
	h    sfs.Handle   // set by Open
	ents []sfs.Dirent // a directory's listing, taken when a Treaddir starts at 0
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
	return p9.QID{Type: qidType(a.Mode), Path: f.qidPath(f.path, a.Ino)}
}

// qidPath is the QID path of tree path p: the node's own inode number
// if it shows one (a real file system passed through, posix.go), else
// one the server makes for p, with the top bit set so that the two
// kinds never meet.
func (f *file) qidPath(p string, ino uint64) uint64 {
	if ino != 0 {
		return ino &^ (1 << 63)
	}
	return 1<<63 | f.c.srv.qidPath(p)
}

func qidType(m iofs.FileMode) p9.QIDType {
	switch {
	case m.IsDir():
		return p9.TypeDir
	case m&iofs.ModeSymlink != 0:
		return p9.TypeSymlink
	}
	return p9.TypeRegular
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

// StatFS implements p9.File.StatFS: the node's file system (a
// sfs.StatFSer), or else the tree's own.
func (f *file) StatFS() (p9.FSStat, error) {
	s, err := f.ch.StatFS(f.c.ctx)
	if errors.Is(err, syscall.ENOSYS) {
		return p9.FSStat{Type: 0x01021997 /* V9FS_MAGIC */, BlockSize: 4096, NameLength: 255}, nil
	}
	if err != nil {
		return p9.FSStat{}, errno(err)
	}
	return p9.FSStat{Type: s.Type, BlockSize: s.BlockSize, Blocks: s.Blocks, BlocksFree: s.BlocksFree,
		BlocksAvailable: s.BlocksAv, Files: s.Files, FilesFree: s.FilesFree, FSID: s.FSID, NameLength: s.NameLength}, nil
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
	mode := toP9Mode(a.Mode)
	nlink := p9.NLink(1)
	if a.Mode.IsDir() {
		nlink = 2
	}
	if a.Nlink != 0 {
		nlink = p9.NLink(a.Nlink)
	}
	t := a.Mtime
	if t.IsZero() {
		t = started
	}
	sec, nsec := uint64(t.Unix()), uint64(t.Nanosecond())
	asec, ansec, csec, cnsec := sec, nsec, sec, nsec
	if !a.Atime.IsZero() {
		asec, ansec = uint64(a.Atime.Unix()), uint64(a.Atime.Nanosecond())
	}
	if !a.Ctime.IsZero() {
		csec, cnsec = uint64(a.Ctime.Unix()), uint64(a.Ctime.Nanosecond())
	}
	var o cred.Owner
	if a.Owner != nil {
		o = *a.Owner
	}
	return p9.Attr{
		Mode:         mode,
		UID:          p9.UID(o.UID),
		GID:          p9.GID(o.GID),
		NLink:        nlink,
		RDev:         p9.Dev(a.Rdev),
		Size:         uint64(a.Size),
		BlockSize:    4096,
		Blocks:       uint64(a.Blocks),
		ATimeSeconds: asec, ATimeNanoSeconds: ansec,
		MTimeSeconds: sec, MTimeNanoSeconds: nsec,
		CTimeSeconds: csec, CTimeNanoSeconds: cnsec,
	}
}

// toP9Mode is the mode(2) bits of m: its type, permissions and the
// setuid, setgid and sticky bits.
func toP9Mode(m iofs.FileMode) p9.FileMode {
	var t p9.FileMode
	switch {
	case m.IsDir():
		t = p9.ModeDirectory
	case m&iofs.ModeSymlink != 0:
		t = p9.ModeSymlink
	case m&iofs.ModeCharDevice != 0:
		t = p9.ModeCharacterDevice
	case m&iofs.ModeDevice != 0:
		t = p9.ModeBlockDevice
	case m&iofs.ModeNamedPipe != 0:
		t = p9.ModeNamedPipe
	case m&iofs.ModeSocket != 0:
		t = p9.ModeSocket
	default:
		t = p9.ModeRegular
	}
	t |= p9.FileMode(m.Perm())
	if m&iofs.ModeSetuid != 0 {
		t |= p9.FileMode(unix.S_ISUID)
	}
	if m&iofs.ModeSetgid != 0 {
		t |= p9.FileMode(unix.S_ISGID)
	}
	if m&iofs.ModeSticky != 0 {
		t |= p9.FileMode(unix.S_ISVTX)
	}
	return t
}

// fromP9Mode is the iofs.FileMode of the mode(2) bits m.
func fromP9Mode(m p9.FileMode) iofs.FileMode {
	mode := iofs.FileMode(m & 0o777)
	switch m.FileType() {
	case p9.ModeDirectory:
		mode |= iofs.ModeDir
	case p9.ModeSymlink:
		mode |= iofs.ModeSymlink
	case p9.ModeCharacterDevice:
		mode |= iofs.ModeDevice | iofs.ModeCharDevice
	case p9.ModeBlockDevice:
		mode |= iofs.ModeDevice
	case p9.ModeNamedPipe:
		mode |= iofs.ModeNamedPipe
	case p9.ModeSocket:
		mode |= iofs.ModeSocket
	}
	if m&p9.FileMode(unix.S_ISUID) != 0 {
		mode |= iofs.ModeSetuid
	}
	if m&p9.FileMode(unix.S_ISGID) != 0 {
		mode |= iofs.ModeSetgid
	}
	if m&p9.FileMode(unix.S_ISVTX) != 0 {
		mode |= iofs.ModeSticky
	}
	return mode
}

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

// openFlags keeps the open(2) flags of a Tlopen or Tlcreate that the
// tree may act on: the access mode, O_TRUNC, O_APPEND and the sync
// flags (9P2000.L's values are Linux's).
func openFlags(mode p9.OpenFlags) sfs.OpenFlags {
	return sfs.OpenFlags(int(mode) & (unix.O_ACCMODE | unix.O_TRUNC | unix.O_APPEND | unix.O_DSYNC | unix.O_SYNC | unix.O_NOATIME))
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
	h, err := f.ch.Open(f.c.ctx, openFlags(mode))
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

// WriteAt implements p9.File.WriteAt. A write to an sfs.BlockingWriter
// (a guest's stdin, which blocks while the pipe is full) runs under a
// context that ends as a read's does; others under the connection's.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	h := f.handle()
	if h == nil {
		return 0, linux.EBADF
	}
	ctx := f.c.ctx
	if _, ok := h.(sfs.BlockingWriter); ok {
		var done func()
		ctx, done = f.c.startRead(f.path)
		defer done()
	}
	n, err := h.Write(ctx, p, off)
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

// FSync implements p9.File.FSync: the handle's, if it is an sfs.Syncer.
func (f *file) FSync() error {
	if s, ok := f.handle().(sfs.Syncer); ok {
		return errno(s.Sync(f.c.ctx))
	}
	return nil
}

// Readdir implements p9.File.Readdir. A listing is taken when a read
// starts at offset 0 and later reads page through it, so that a large
// directory is listed once and its offsets stay put.
func (f *file) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	f.mu.Lock()
	ents := f.ents
	f.mu.Unlock()
	if offset == 0 || ents == nil {
		var err error
		if ents, err = f.ch.List(f.c.ctx); err != nil {
			return nil, errno(err)
		}
		f.mu.Lock()
		f.ents = ents
		f.mu.Unlock()
	}
	names := make([]string, len(ents))
	qs := make(map[string]p9.QID, len(ents))
	for i, e := range ents {
		names[i] = e.Name
		qs[e.Name] = p9.QID{Type: qidType(e.Mode), Path: f.qidPath(path.Join(f.path, e.Name), e.Ino)}
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
	nf := &file{c: f.c, path: path.Join(f.path, name), ch: ch, h: h}
	return nf, nf.qid(ch.Attr()), iounit, nil
}

// chownNew gives ch, just made, the owner a privileged client asked for
// (as a chown would), if its node is an sfs.Setattrer; anyone else's
// uid and gid are ignored. It returns ch stated again.
func (f *file) chownNew(ch sfs.Chan, uid p9.UID, gid p9.GID) (sfs.Chan, error) {
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
	a := ch.Attr()
	return p9.QID{Type: qidType(a.Mode), Path: f.qidPath(path.Join(f.path, name), a.Ino)}
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
