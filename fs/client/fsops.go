package client

import (
	"net"
	"path"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
	"sandfs/fs/ninep"
)

// NewConn makes a Client of c, a connection to a sandfs 9P server that
// the caller has already made (for example one end of a net.Pipe whose
// other end the daemon serves with ninep.Server.ServeConnAs), attaching
// with token as the attach name ("" where the server needs none).
func NewConn(c net.Conn, token string) (*Client, error) {
	cl, err := ninep.NewClient(c, msize)
	if err != nil {
		c.Close()
		return nil, &Error{Op: "9p version", Errno: errno(err)}
	}
	root, err := cl.Attach(token)
	if err != nil {
		cl.Close()
		return nil, &Error{Op: "9p attach", Errno: errno(err)}
	}
	return &Client{cl: cl, root: root}, nil
}

// Attr is what StatAttr tells of a file.
type Attr struct {
	Mode  uint32 // p9 mode: type bits and permissions
	UID   uint32
	GID   uint32
	Size  int64
	MTime time.Time
}

// Dir reports whether a is a directory.
func (a Attr) Dir() bool { return p9.FileMode(a.Mode).IsDir() }

// Symlink reports whether a is a symbolic link.
func (a Attr) Symlink() bool { return p9.FileMode(a.Mode).IsSymlink() }

// Perm is a's permission bits.
func (a Attr) Perm() uint32 { return a.Mode & 0o777 }

// StatAttr returns path's attributes.
func (c *Client) StatAttr(path string) (Attr, error) {
	_, f, _, a, err := c.root.WalkGetAttr(sfs.SplitPath(path))
	if err != nil {
		return Attr{}, &Error{Op: "stat " + path, Errno: errno(err)}
	}
	f.Close()
	return Attr{
		Mode: uint32(a.Mode), UID: uint32(a.UID), GID: uint32(a.GID), Size: int64(a.Size),
		MTime: time.Unix(int64(a.MTimeSeconds), int64(a.MTimeNanoSeconds)),
	}, nil
}

// StatFS describes the file system path is on (Tstatfs): for a path
// under sandboxes/<id>/fs/, the guest's own, as its agent says (the
// numbers are the guest's, unchecked: bound them before computing).
func (c *Client) StatFS(path string) (sfs.FSStat, error) {
	_, f, err := c.root.Walk(sfs.SplitPath(path))
	if err != nil {
		return sfs.FSStat{}, &Error{Op: "statfs " + path, Errno: errno(err)}
	}
	defer f.Close()
	st, err := f.StatFS()
	if err != nil {
		return sfs.FSStat{}, &Error{Op: "statfs " + path, Errno: errno(err)}
	}
	return sfs.FSStat{Type: st.Type, BlockSize: st.BlockSize, Blocks: st.Blocks, BlocksFree: st.BlocksFree,
		BlocksAv: st.BlocksAvailable, Files: st.Files, FilesFree: st.FilesFree, FSID: st.FSID, NameLength: st.NameLength}, nil
}

// inParent walks to path's directory and runs fn on it with path's last
// name; op names the request in errors.
func (c *Client) inParent(op, p string, fn func(dir p9.File, name string) error) error {
	names := sfs.SplitPath(p)
	if len(names) == 0 {
		return &Error{Op: op + " " + p, Errno: syscall.EINVAL}
	}
	_, d, err := c.root.Walk(names[:len(names)-1])
	if err != nil {
		return &Error{Op: op + " " + p, Errno: errno(err)}
	}
	defer d.Close()
	if err := fn(d, names[len(names)-1]); err != nil {
		return &Error{Op: op + " " + p, Errno: errno(err)}
	}
	return nil
}

// Mkdir makes the directory path (EEXIST if something is there) with
// permissions perm.
func (c *Client) Mkdir(p string, perm uint32) error {
	return c.inParent("mkdir", p, func(d p9.File, name string) error {
		_, err := d.Mkdir(name, p9.FileMode(perm&0o7777), 0, 0)
		return err
	})
}

// Remove removes the file path, or the empty directory when dir is set.
func (c *Client) Remove(p string, dir bool) error {
	var flags uint32
	if dir {
		flags = 0x200 // AT_REMOVEDIR
	}
	return c.inParent("remove", p, func(d p9.File, name string) error {
		return d.UnlinkAt(name, flags)
	})
}

// Rename moves oldPath to newPath (both in the same file system of the
// tree, EXDEV otherwise), replacing what is there as rename(2) does.
func (c *Client) Rename(oldPath, newPath string) error {
	nn := sfs.SplitPath(newPath)
	if len(nn) == 0 {
		return &Error{Op: "rename " + oldPath, Errno: syscall.EINVAL}
	}
	_, nd, err := c.root.Walk(nn[:len(nn)-1])
	if err != nil {
		return &Error{Op: "rename to " + newPath, Errno: errno(err)}
	}
	defer nd.Close()
	return c.inParent("rename", oldPath, func(od p9.File, name string) error {
		return od.RenameAt(name, nd, path.Base("/"+newPath))
	})
}
