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

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
)

// iounit is the largest read or write the server asks clients to send by
// default (Server.SetIOUnit): small, since ctl messages are at most 4 KiB
// and generated text is short (p9 fsimpl/staticfs uses 4096 too).
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
	templatefs.NotLockable

	c     *conn
	path  string   // tree path, "" for the root
	ch    sfs.Chan // the node, with the owner it shows
	scope scope    // the passed-through file system it is in, if any (ident.go)

	mu   sync.Mutex   // protects h and ents
	h    sfs.Handle   // set by Open
	ents []sfs.Dirent // a directory's listing, taken when a Treaddir starts at 0
}

var _ p9.File = (*file)(nil)

// Renamed implements p9.File.Renamed: a node that names its file by path
// (sfs.Mover) is told where the rename moved it. The p9 server calls it
// for every fid in the moved subtree, parents first, under its global
// rename lock.
func (f *file) Renamed(newDir p9.File, newName string) {
	d, ok := newDir.(*file)
	if !ok {
		return
	}
	if m, ok := f.ch.Node().(sfs.Mover); ok {
		m.Moved(d.ch.Node(), newName)
	}
}

// errno converts a tree error to the errno p9 sends in Rlerror.
func errno(err error) error {
	if err == nil {
		return nil
	}
	return linux.Errno(msg.Errno(err))
}

func (f *file) qid(a sfs.Attr) p9.QID {
	return p9.QID{Type: qidType(a.Mode), Path: f.c.srv.qidOf(f.path, a.Ino, f.scope)}
}

// child is f's child name, whose node is ch (and h, if it was opened
// as it was made).
func (f *file) child(name string, ch sfs.Chan, h sfs.Handle) *file {
	p := path.Join(f.path, name)
	return &file{c: f.c, path: p, ch: ch, h: h, scope: f.scope.below(p, ch.Attr().Ino)}
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
	cur := &file{c: f.c, path: f.path, ch: f.ch, scope: f.scope}
	for _, name := range names {
		ch, err := cur.ch.Walk(f.c.ctx, name)
		if err != nil {
			return nil, nil, errno(err)
		}
		cur = cur.child(name, ch, nil)
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
	return qs, nf, p9.AttrMaskAll, toP9Attr(nf.(*file).ch.Attr(), f.c.srv.ids), nil
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
	return f.qid(a), p9.AttrMaskAll, toP9Attr(a, f.c.srv.ids), nil
}

// started is the time shown for nodes without an mtime.
var started = time.Now()

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
		return f.qid(a), f.c.srv.ioUnit, nil
	}
	h, err := f.ch.Open(f.c.ctx, openFlags(mode))
	if err != nil {
		return p9.QID{}, 0, errno(err)
	}
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
	return f.qid(a), f.c.offerFile(h, f.c.srv.ioUnit), nil
}

func (f *file) handle() sfs.Handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

// ReadAt implements p9.File.ReadAt. It runs under a context that ends
// when the client flushes or clunks the read or the connection ends. A
// large read of a client that takes passed reads is not made here: its
// reply passes the file's descriptor (passread.go), and p is left as it
// is (the reply does not carry it).
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	h := f.handle()
	if h == nil {
		return 0, linux.EBADF
	}
	tag := uint16(off)
	ctx, off, done, err := f.c.begin(off, true)
	if err != nil {
		return 0, err
	}
	defer done()
	if n, ok := f.c.passRead(tag, h, off, len(p)); ok {
		return n, nil
	}
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
	_, blocking := h.(sfs.BlockingWriter)
	ctx, off, done, err := f.c.begin(off, blocking)
	if err != nil {
		return 0, err
	}
	defer done()
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
		p := path.Join(f.path, e.Name)
		qs[e.Name] = p9.QID{Type: qidType(e.Mode), Path: f.c.srv.qidOf(p, e.Ino, f.scope.below(p, e.Ino))}
	}
	return readdir.Readdir(offset, count, names, qs)
}
