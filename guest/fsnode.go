package guest

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// fsTree serves fs/: the guest's file system under the server's root, as
// fs nodes, read and write. Confinement rests on three rules:
//
//   - a node is a path below the root, and every operation reaches it
//     again with openat2(root, path, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//     RESOLVE_NO_MAGICLINKS) and O_NOFOLLOW: no symbolic link on the way
//     or at the end is ever followed, and nothing above the root is
//     reached; names are single components, never "", ".", ".." or with
//     "/" (checkName);
//   - walking a symbolic link gives the link itself, which is no
//     directory (nothing is walked through it), cannot be opened (ELOOP)
//     and whose text Readlink returns for the client to interpret;
//   - creations and changes use the *at calls relative to the parent's
//     descriptor with AT_SYMLINK_NOFOLLOW, or the node's own descriptor
//     (re-opened through /proc/self/fd, which names that inode, never a
//     path).
//
// Nodes hold no descriptor (a node is forgotten without being closed);
// an open file's handle holds its own until Close.
type fsTree struct {
	rootFD int   // O_PATH descriptor of the root, for the life of the server
	err    error // why the root could not be opened
}

func newFSTree(root string) *fsTree {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fsTree{rootFD: -1, err: err}
	}
	return &fsTree{rootFD: fd}
}

// open reaches path (relative to the root, "" for the root) again
// without following any symbolic link: an O_PATH descriptor unless flags
// ask for more.
func (t *fsTree) open(path string, flags int) (int, error) {
	if t.err != nil {
		return -1, t.err
	}
	if path == "" {
		path = "."
	}
	for {
		fd, err := unix.Openat2(t.rootFD, path, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EAGAIN || err == unix.EINTR { // a rename raced the lookup
			continue
		}
		return fd, err
	}
}

// with runs f on a descriptor of path opened with flags, then closes it.
func (t *fsTree) with(path string, flags int, f func(fd int) error) error {
	fd, err := t.open(path, flags)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd)
}

// node makes the node of path from what fstat said of it.
func (t *fsTree) node(path string, st *unix.Stat_t) sfs.Node {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return &fsDir{fsNode{t: t, path: path, st: *st}}
	case unix.S_IFLNK:
		return &fsLink{fsNode{t: t, path: path, st: *st}}
	}
	return &fsFile{fsNode{t: t, path: path, st: *st}}
}

// lookup returns the node of path.
func (t *fsTree) lookup(path string) (sfs.Node, error) {
	var st unix.Stat_t
	if err := t.with(path, unix.O_PATH, func(fd int) error { return fstat(fd, &st) }); err != nil {
		return nil, err
	}
	return t.node(path, &st), nil
}

// fsNode is what every node of fs/ has: its path and what fstat said
// when it was found, which the first Stat (the adapter's, right after the
// lookup) uses; later Stats ask again.
type fsNode struct {
	t    *fsTree
	path string // relative to the root, "" for the root
	st   unix.Stat_t
	used atomic.Bool
}

// fsDir is a directory of fs/, fsFile any other file but a symbolic
// link, fsLink a symbolic link.
type (
	fsDir  struct{ fsNode }
	fsFile struct{ fsNode }
	fsLink struct{ fsNode }
)

var (
	_ sfs.Dir        = (*fsDir)(nil)
	_ sfs.Creator    = (*fsDir)(nil)
	_ sfs.Mkdirer    = (*fsDir)(nil)
	_ sfs.Remover    = (*fsDir)(nil)
	_ sfs.Renamer    = (*fsDir)(nil)
	_ sfs.Linker     = (*fsDir)(nil)
	_ sfs.Symlinker  = (*fsDir)(nil)
	_ sfs.Mknoder    = (*fsDir)(nil)
	_ sfs.Setattrer  = (*fsDir)(nil)
	_ sfs.StatFSer   = (*fsDir)(nil)
	_ sfs.Opener     = (*fsFile)(nil)
	_ sfs.Truncater  = (*fsFile)(nil)
	_ sfs.Readlinker = (*fsLink)(nil)
	_ sfs.Opener     = (*fsLink)(nil)
)

func fstat(fd int, st *unix.Stat_t) error {
	return unix.Fstatat(fd, "", st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// procPath names the inode of descriptor fd, never a path.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// checkName refuses names that are not one plain path component.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return syscall.EINVAL
	}
	return nil
}

func (n *fsNode) child(name string) string {
	if n.path == "" {
		return name
	}
	return n.path + "/" + name
}

// Stat implements sfs.Node.Stat: the file's own owner, mode and times.
func (n *fsNode) Stat(context.Context) (sfs.Attr, error) {
	if !n.used.Swap(true) {
		return toAttr(&n.st), nil
	}
	var st unix.Stat_t
	if err := n.t.with(n.path, unix.O_PATH, func(fd int) error { return fstat(fd, &st) }); err != nil {
		return sfs.Attr{}, err
	}
	return toAttr(&st), nil
}

func toAttr(st *unix.Stat_t) sfs.Attr {
	return sfs.Attr{
		Mode:  sfs.ModeOfUnix(st.Mode),
		Size:  st.Size,
		Mtime: time.Unix(st.Mtim.Unix()),
		Owner: &cred.Owner{UID: st.Uid, GID: st.Gid},
		Ino:   st.Ino, Nlink: st.Nlink, Rdev: st.Rdev, Blocks: st.Blocks,
		Atime: time.Unix(st.Atim.Unix()), Ctime: time.Unix(st.Ctim.Unix()),
	}
}

// StatFS implements sfs.StatFSer.
func (n *fsNode) StatFS(context.Context) (sfs.FSStat, error) {
	var s unix.Statfs_t
	if err := n.t.with(n.path, unix.O_PATH, func(fd int) error { return unix.Fstatfs(fd, &s) }); err != nil {
		return sfs.FSStat{}, err
	}
	return sfs.FSStat{
		Type: uint32(s.Type), BlockSize: uint32(s.Bsize), Blocks: s.Blocks, BlocksFree: s.Bfree,
		BlocksAv: s.Bavail, Files: s.Files, FilesFree: s.Ffree,
		FSID: uint64(uint32(s.Fsid.Val[0])) | uint64(uint32(s.Fsid.Val[1]))<<32, NameLength: uint32(s.Namelen),
	}, nil
}

// Lookup implements sfs.Dir.Lookup.
func (d *fsDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return d.t.lookup(d.child(name))
}

// List implements sfs.Dir.List: the whole directory, read once with
// getdents64(2), without "." and "..".
func (d *fsDir) List(context.Context) ([]sfs.Dirent, error) {
	var out []sfs.Dirent
	err := d.t.with(d.path, unix.O_RDONLY|unix.O_DIRECTORY, func(fd int) error {
		var err error
		out, err = sfs.ReadDirents(fd)
		return err
	})
	return out, err
}

// Readlink implements sfs.Readlinker.
func (l *fsLink) Readlink(context.Context) (string, error) {
	var s string
	err := l.t.with(l.path, unix.O_PATH, func(fd int) error {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		s = string(buf[:max(n, 0)])
		return err
	})
	return s, err
}

// Open implements sfs.Opener: a symbolic link is never followed.
func (l *fsLink) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return nil, syscall.ELOOP
}
