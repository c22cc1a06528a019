package fusefs

// The POSIX operations beyond create, mkdir and remove, for trees that
// pass a real file system through (a world's fs/, a sandbox's fs/):
// rename, link, symlink, readlink, chmod, chown, utimes, fsync, statfs.
// Each goes to the sfs.Chan operation of the same name (fs/chanposix.go),
// which checks the caller and refuses (EPERM) on a node without it.

import (
	"context"
	"maps"
	"path"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

var (
	_ gofs.NodeRenamer    = (*node)(nil)
	_ gofs.NodeLinker     = (*node)(nil)
	_ gofs.NodeSymlinker  = (*node)(nil)
	_ gofs.NodeReadlinker = (*node)(nil)
	_ gofs.NodeStatfser   = (*node)(nil)
	_ gofs.FileFsyncer    = (*handle)(nil)
)

// Rename implements gofs.NodeRenamer. RENAME_NOREPLACE is checked here
// (EEXIST if newName is there: not atomic against a concurrent create);
// RENAME_EXCHANGE is not offered (EINVAL).
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	ctx = settled(ctx)
	switch flags {
	case 0:
	case unix.RENAME_NOREPLACE:
		if _, err := np.cur().Walk(ctx, newName); err == nil {
			return syscall.EEXIST
		} else if errno(err) != syscall.ENOENT {
			return errno(err)
		}
	default:
		return syscall.EINVAL
	}
	if err := n.cur().Rename(ctx, name, np.cur(), newName); err != nil {
		return errno(err)
	}
	n.moved(name, np, newName)
	return 0
}

// moved follows a rename of name in n to newName in np (go-fuse moves
// its inode after Rename returns): the inode numbers of the old path and
// of every path under it go to the new paths, and every inode the kernel
// knows there takes its new path, its tree node (if it names its file by
// path, sfs.Mover) told its new place, parents first.
func (n *node) moved(name string, np *node, newName string) {
	oldP, newP := path.Join(n.p(), name), path.Join(np.p(), newName)
	n.m.movePaths(oldP, newP)
	ch := n.GetChild(name)
	if ch == nil {
		return
	}
	if cn, ok := ch.Operations().(*node); ok {
		cn.follow(np.cur().Node(), newName, newP)
	}
}

// follow gives n (moved to name in dir) its new path p, then its
// children theirs.
func (n *node) follow(dir sfs.Node, name, p string) {
	self := n.seat.move(p).Node()
	if mv, ok := self.(sfs.Mover); ok && self != nil {
		mv.Moved(dir, name)
	}
	for cname, ci := range n.Children() {
		if cn, ok := ci.Operations().(*node); ok {
			cn.follow(self, cname, path.Join(p, cname))
		}
	}
}

// movePaths renames the inode numbers of old and the paths under it to
// new (the numbers new and the paths under it had go: rename replaced
// that file or empty directory).
func (m *Mount) movePaths(old, new string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, i := range m.inos {
		if under(p, new) {
			delete(m.inos, p)
			delete(m.seats, i)
		}
	}
	moved := map[string]uint64{}
	for p, i := range m.inos {
		if under(p, old) {
			moved[new+p[len(old):]] = i
			delete(m.inos, p)
		}
	}
	maps.Copy(m.inos, moved)
}

// under reports whether p is dir or a path under it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Link implements gofs.NodeLinker; the target is looked up again by
// its path (Mount.walk).
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	ctx = settled(ctx)
	t, err := n.m.walk(ctx, tn.p())
	if err != nil {
		return nil, errno(err)
	}
	if err := n.cur().Link(ctx, t, name); err != nil {
		return nil, errno(err)
	}
	c, err := n.cur().Walk(ctx, name)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, c, out)
}

// walk looks p up from the root, as the caller: the node a path names
// now (a tree node that does not follow renames, sfs.Mover, still names
// its old place).
func (m *Mount) walk(ctx context.Context, p string) (sfs.Chan, error) {
	c := m.root.cur()
	for _, name := range sfs.SplitPath(p) {
		var err error
		if c, err = c.Walk(ctx, name); err != nil {
			return sfs.Chan{}, err
		}
	}
	return c, nil
}

// Symlink implements gofs.NodeSymlinker.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = settled(ctx)
	c, err := n.cur().Symlink(ctx, target, name)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, c, out)
}

// Readlink implements gofs.NodeReadlinker.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := n.cur().Readlink(caller(ctx))
	if err != nil {
		return nil, errno(err)
	}
	return []byte(s), 0
}

// Statfs implements gofs.NodeStatfser: the file system of a node that
// can say (sfs.StatFSer), zeros for the generated tree.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.cur().StatFS(caller(ctx))
	if errno(err) == syscall.ENOSYS {
		return 0
	}
	if err != nil {
		return errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.BlocksFree, st.BlocksAv
	out.Files, out.Ffree = st.Files, st.FilesFree
	out.Bsize, out.Frsize, out.NameLen = st.BlockSize, st.BlockSize, st.NameLength
	return 0
}

// change is the sfs.Change a FUSE setattr asks for (mode, owner,
// times), nil if it asks none of them.
func change(in *fuse.SetAttrIn) *sfs.Change {
	var c sfs.Change
	any := false // a field is set
	if m, ok := in.GetMode(); ok {
		mode := sfs.ModeOfUnix(m)
		c.Mode, any = &mode, true
	}
	if u, ok := in.GetUID(); ok {
		c.UID, any = &u, true
	}
	if g, ok := in.GetGID(); ok {
		c.GID, any = &g, true
	}
	// A time of "now" is the zero time (Chan.SetAttr lets whoever may
	// write set it, an explicit time only the owner).
	if in.Valid&fuse.FATTR_ATIME != 0 {
		var t time.Time
		if in.Valid&fuse.FATTR_ATIME_NOW == 0 {
			t = time.Unix(int64(in.Atime), int64(in.Atimensec))
		}
		c.Atime, any = &t, true
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		var t time.Time
		if in.Valid&fuse.FATTR_MTIME_NOW == 0 {
			t = time.Unix(int64(in.Mtime), int64(in.Mtimensec))
		}
		c.Mtime, any = &t, true
	}
	if !any {
		return nil
	}
	return &c
}

// setattr applies c to n: through Chan.SetAttr on a node that changes
// (sfs.Setattrer); elsewhere a change of times only is ignored (`touch`
// of a ctl file) and any other is EPERM.
func (n *node) setattr(ctx context.Context, c *sfs.Change) syscall.Errno {
	ch := n.cur()
	if _, ok := ch.Node().(sfs.Setattrer); !ok && c.Mode == nil && c.UID == nil && c.GID == nil {
		return 0
	}
	return errno(ch.SetAttr(ctx, *c))
}

// Fsync implements gofs.FileFsyncer: the handle's Sync if it has one.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	s, ok := h.h.(sfs.Syncer)
	if !ok {
		return 0
	}
	return errno(s.Sync(cred.With(ctx, h.cred)))
}
