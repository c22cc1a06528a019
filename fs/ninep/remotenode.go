package ninep

import (
	"context"
	"fmt"
	iofs "io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// BindOptions say how a directory bound with Remote.Bind behaves.
type BindOptions struct {
	// Links: symbolic links under it are followed, kept within it (".."
	// and absolute targets stop at the bind point), as the node model has
	// no links. Otherwise they show as files.
	Links bool
	// Messages: its files are generated message and stream files (size
	// 0, attributes that do not change). Their truncation is answered
	// here as the node model's default: to 0 accepted and ignored (what
	// `echo msg > file` asks), other sizes EPERM; and a node's Stat
	// answers with what its lookup saw, so that a transport's getattrs
	// (FUSE asks before most operations) cost the server nothing.
	Messages bool
	// ReadAhead: regular files opened read-only under it read ahead
	// (remoteahead.go): sequential reads are served from a window that
	// larger and concurrent reads to the server fill. Not for files
	// whose reads must reach the server as asked (streams, ctl files).
	ReadAhead bool
	// Identity: its files show the server's identity of them (the QID
	// path) as their inode number (sfs.Attr.Ino), where the server gives
	// one of the file's own (the top bit clear: fs/ninep's server sets
	// it on the numbers it makes up per path), so a hard link's names
	// are one file. Root's tree has it (sandfs mount).
	Identity bool
}

// remoteNode is what remote files and directories share: a path.
type remoteNode struct {
	r    *Remote
	loc  *place      // its path from the attach root
	base int         // length of the bind point's path (links stay within)
	bind BindOptions // of the bind point the node is under
	attr *onceAttr   // the lookup's attributes, nil if none
	// target: reached through a symbolic link (a Links bind), so loc is
	// the link's target, which a rename of the link does not move.
	target bool
}

// place is a node's path, which a rename changes (Moved).
type place struct {
	mu    sync.Mutex
	names []string // never changed in place: Moved sets another slice
}

func newNode(r *Remote, names []string, base int, bind BindOptions) remoteNode {
	return remoteNode{r: r, loc: &place{names: names}, base: base, bind: bind}
}

// names is n's path from the attach root, as names.
func (n *remoteNode) names() []string {
	n.loc.mu.Lock()
	defer n.loc.mu.Unlock()
	return n.loc.names
}

// Moved implements sfs.Mover: a rename (by this tree, Remote's Rename)
// moved n's file to newName in newDir, so n names it by its new path
// from now on. The adapters call it for every node they know under the
// moved one, parents first.
func (n *remoteNode) Moved(newDir sfs.Node, newName string) {
	if n.target {
		return
	}
	var dir *remoteNode
	switch d := newDir.(type) {
	case *remoteDir:
		dir = &d.remoteNode
	default:
		return
	}
	if dir.r != n.r {
		return
	}
	names := append(append([]string(nil), dir.names()...), newName)
	n.loc.mu.Lock()
	n.loc.names = names
	n.loc.mu.Unlock()
}

// remoteDir is a remote directory.
type remoteDir struct {
	remoteNode
	fixed *sfs.Attr // a bind point's attributes, answered without the server
}

// remoteFile is a remote file.
type remoteFile struct{ remoteNode }

var (
	_ sfs.Dir       = (*remoteDir)(nil)
	_ sfs.Creator   = (*remoteDir)(nil)
	_ sfs.Mkdirer   = (*remoteDir)(nil)
	_ sfs.Remover   = (*remoteDir)(nil)
	_ sfs.Opener    = (*remoteFile)(nil)
	_ sfs.Truncater = (*remoteFile)(nil)
)

// onceAttr is the attributes found by the Lookup that made a node: the
// Stat that adapters make right after a Lookup uses them instead of
// asking the server again; later Stats ask.
type onceAttr struct {
	used atomic.Bool
	a    sfs.Attr // immutable
}

func (o *onceAttr) take() (sfs.Attr, bool) {
	if o == nil || o.used.Swap(true) {
		return sfs.Attr{}, false
	}
	return o.a, true
}

func (n *remoteNode) path() string { return strings.Join(n.names(), "/") }

// child returns the node of n's entry name, not looked up.
func (n *remoteNode) child(name string) remoteNode {
	return newNode(n.r, append(append([]string(nil), n.names()...), name), n.base, n.bind)
}

// at returns a node like n for path names (a link's target).
func (n *remoteNode) at(names []string) remoteNode {
	c := newNode(n.r, names, n.base, n.bind)
	c.target = true
	return c
}

// getattr walks n's path on s and returns its QID and attributes (the
// fid is clunked).
func (n *remoteNode) getattr(ctx context.Context, s *session) (p9.QID, p9.Attr, error) {
	type qa struct {
		q p9.QID
		a p9.Attr
	}
	v, err := call(ctx, n.r, s, "walk "+n.path(), true, nil, func() (qa, error) {
		q, f, a, err := walkGetAttr(s.root, n.names())
		if err != nil {
			return qa{}, err
		}
		return qa{q, a}, f.Close()
	})
	return v.q, v.a, err
}

// walkGetAttr is root.WalkGetAttr(names), which for no names is a walk
// and a getattr; it returns the last QID.
func walkGetAttr(root p9.File, names []string) (p9.QID, p9.File, p9.Attr, error) {
	if len(names) > 0 {
		qs, f, _, a, err := root.WalkGetAttr(names)
		if err == nil && len(qs) != len(names) {
			f.Close()
			err = fmt.Errorf("%w: walk of %d names gave %d QIDs", ErrBadReply, len(names), len(qs))
		}
		if err != nil {
			return p9.QID{}, nil, p9.Attr{}, err
		}
		return qs[len(qs)-1], f, a, nil
	}
	_, f, err := root.Walk(nil)
	if err != nil {
		return p9.QID{}, nil, p9.Attr{}, err
	}
	q, _, a, err := f.GetAttr(p9.AttrMaskAll)
	if err != nil {
		f.Close()
		return p9.QID{}, nil, p9.Attr{}, err
	}
	return q, f, a, nil
}

// attrOf is the Attr of n's file, whose QID is q and attributes a.
func (n *remoteNode) attrOf(q p9.QID, a p9.Attr) sfs.Attr {
	at := FromP9Attr(a)
	at.Ino = n.ino(q)
	return at
}

// ino is the inode number n shows for a file whose QID is q: its path
// under an Identity bind if it is the file's own, else 0.
func (n *remoteNode) ino(q p9.QID) uint64 {
	if !n.bind.Identity || q.Path&(1<<63) != 0 {
		return 0
	}
	return q.Path
}

// Stat implements fs.Node.Stat: the lookup's attributes once (always,
// under a Messages bind), then a fresh getattr.
func (n *remoteNode) Stat(ctx context.Context) (sfs.Attr, error) {
	if n.bind.Messages && n.attr != nil {
		return n.attr.a, nil
	}
	if a, ok := n.attr.take(); ok {
		return a, nil
	}
	s, err := n.r.shared(ctx)
	if err != nil {
		return sfs.Attr{}, err
	}
	q, a, err := n.getattr(ctx, s)
	if err != nil {
		return sfs.Attr{}, err
	}
	return n.attrOf(q, a), nil
}

// Stat implements fs.Node.Stat.
func (d *remoteDir) Stat(ctx context.Context) (sfs.Attr, error) {
	if d.fixed != nil {
		return *d.fixed, nil
	}
	return d.remoteNode.Stat(ctx)
}

// maxLinks bounds symlink resolution, as the kernel's MAXSYMLINKS.
const maxLinks = 40

// Lookup implements fs.Dir.Lookup, following links if the bind says so.
func (d *remoteDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	s, err := d.r.shared(ctx)
	if err != nil {
		return nil, err
	}
	c := d.child(name)
	for hops := 0; ; hops++ {
		q, a, err := c.getattr(ctx, s)
		if err != nil {
			return nil, err
		}
		if a.Mode.IsSymlink() && c.bind.Links {
			if hops == maxLinks {
				return nil, syscall.ELOOP
			}
			t, err := c.readlink(ctx, s)
			if err != nil {
				return nil, err
			}
			c = c.at(resolveLink(c.names(), c.base, t))
			continue
		}
		c.attr = &onceAttr{a: c.attrOf(q, a)}
		if a.Mode.IsDir() {
			return &remoteDir{remoteNode: c}, nil
		}
		return &remoteFile{c}, nil
	}
}

// readlink returns the target of the symlink at n.
func (n *remoteNode) readlink(ctx context.Context, s *session) (string, error) {
	return call(ctx, n.r, s, "readlink "+n.path(), true, nil, func() (string, error) {
		_, f, err := s.root.Walk(n.names())
		if err != nil {
			return "", err
		}
		defer f.Close()
		return f.Readlink()
	})
}

// resolveLink returns the path that the symlink at names, whose text is
// target, points to, kept within names[:base] (".." stops there).
func resolveLink(names []string, base int, target string) []string {
	var out []string
	if strings.HasPrefix(target, "/") {
		out = append(out, names[:base]...)
	} else {
		out = append(out, names[:len(names)-1]...)
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(out) > base {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// List implements fs.Dir.List.
func (d *remoteDir) List(ctx context.Context) ([]sfs.Dirent, error) {
	s, err := d.r.shared(ctx)
	if err != nil {
		return nil, err
	}
	out, err := call(ctx, d.r, s, "readdir "+d.path(), true, nil, func() ([]sfs.Dirent, error) {
		_, f, err := s.root.Walk(d.names())
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			return nil, err
		}
		return ListP9(f, 1<<16)
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Ino = d.ino(p9.QID{Path: out[i].Ino})
	}
	return out, nil
}

// refused explains a refusal by the server (Options.Refused) of op on
// path; other errors are returned as they are.
func (r *Remote) refused(ctx context.Context, op, path string, h sfs.Handle, err error) error {
	en, ok := err.(syscall.Errno)
	if !ok || r.opt.Refused == nil {
		return err
	}
	return r.opt.Refused(ctx, op, path, h, en)
}

// dirOp walks to d on the shared session and runs fn on the fid, a
// bounded request named op and path; a refusal goes through refused.
func (d *remoteDir) dirOp(ctx context.Context, op, path string, keep bool, fn func(s *session, dir p9.File) error) (*session, error) {
	s, err := d.r.shared(ctx)
	if err != nil {
		return nil, err
	}
	err = d.r.do(ctx, s, op+" "+path, true, nil, func() error {
		_, dir, err := s.root.Walk(d.names())
		if err != nil {
			return err
		}
		err = fn(s, dir)
		if err != nil || !keep {
			dir.Close()
		}
		return err
	})
	if err != nil {
		return nil, d.r.refused(ctx, op, path, nil, err)
	}
	return s, nil
}

// Create implements fs.Creator.
func (d *remoteDir) Create(ctx context.Context, name string, flags sfs.OpenFlags, perm iofs.FileMode) (sfs.Node, sfs.Handle, error) {
	c := d.child(name)
	var f p9.File
	s, err := d.dirOp(ctx, "create", c.path(), true, func(s *session, dir p9.File) error {
		// The directory's fid becomes the new, open file (Tlcreate).
		var err error
		f, _, _, err = dir.Create(name, p9.OpenFlags(flags)&p9.OpenFlagsModeMask, p9.FileMode(perm.Perm()), 0, 0)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	n := &remoteFile{c}
	return n, &remoteHandle{n: &n.remoteNode, flags: flags & syscall.O_ACCMODE, s: s, f: f}, nil
}

// Mkdir implements fs.Mkdirer.
func (d *remoteDir) Mkdir(ctx context.Context, name string, perm iofs.FileMode) (sfs.Node, error) {
	c := d.child(name)
	_, err := d.dirOp(ctx, "mkdir", c.path(), false, func(s *session, dir p9.File) error {
		_, err := dir.Mkdir(name, p9.FileMode(perm.Perm()), 0, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &remoteDir{remoteNode: c}, nil
}

// Remove implements fs.Remover: unlink a file or remove an empty directory.
func (d *remoteDir) Remove(ctx context.Context, name string, dir bool) error {
	var flags uint32
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	c := d.child(name)
	_, err := d.dirOp(ctx, "remove", c.path(), false, func(s *session, f p9.File) error {
		return f.UnlinkAt(name, flags)
	})
	return err
}

// Truncate implements fs.Truncater (under a Messages bind, the node
// model's default: 0 ignored, other sizes EPERM).
func (f *remoteFile) Truncate(ctx context.Context, size int64) error {
	if f.bind.Messages {
		if size == 0 {
			return nil
		}
		return syscall.EPERM
	}
	s, err := f.r.shared(ctx)
	if err != nil {
		return err
	}
	err = f.r.do(ctx, s, "truncate "+f.path(), true, nil, func() error {
		_, fl, err := s.root.Walk(f.names())
		if err != nil {
			return err
		}
		defer fl.Close()
		return fl.SetAttr(p9.SetAttrMask{Size: true}, p9.SetAttr{Size: uint64(size)})
	})
	if err != nil {
		return f.r.refused(ctx, "truncate", f.path(), nil, err)
	}
	return nil
}

// Open implements fs.Opener.
func (f *remoteFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	p := f.path()
	o := f.r.opt
	h := &remoteHandle{n: &f.remoteNode, flags: flags & syscall.O_ACCMODE}
	h.private = o.Private != nil && o.Private(p)
	h.once = o.Once != nil && o.Once(p)
	if f.bind.ReadAhead && !h.private && h.flags == syscall.O_RDONLY && f.attr != nil && f.attr.a.Mode.IsRegular() {
		h.ra = &readAhead{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.openLocked(ctx); err != nil {
		if flags.Writable() {
			return nil, f.r.refused(ctx, "open", p, nil, err)
		}
		return nil, err
	}
	if o.Blocking != nil && o.Blocking(p) {
		return blockingRemoteHandle{h}, nil
	}
	return h, nil
}

// blockingRemoteHandle is the handle of a file whose writes may block
// (Options.Blocking).
type blockingRemoteHandle struct{ *remoteHandle }

// BlocksOnWrite implements sfs.BlockingWriter.
func (blockingRemoteHandle) BlocksOnWrite() {}
