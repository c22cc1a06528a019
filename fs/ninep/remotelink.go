package ninep

import (
	"context"
	iofs "io/fs"
	"syscall"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

var (
	_ sfs.Linker     = (*remoteDir)(nil)
	_ sfs.Symlinker  = (*remoteDir)(nil)
	_ sfs.Readlinker = (*remoteFile)(nil)
)

// Link implements fs.Linker: Tlink on the server of a new name in d for
// target, a file of the same bind (EXDEV otherwise, as across mounts).
// Under a bind that follows links, target is the file a link led to.
func (d *remoteDir) Link(ctx context.Context, target sfs.Node, name string) error {
	t, ok := target.(*remoteFile)
	if !ok {
		if _, dir := target.(*remoteDir); dir {
			return syscall.EPERM // link(2) of a directory
		}
		return syscall.EXDEV
	}
	if t.r != d.r || t.base != d.base || t.bind != d.bind {
		return syscall.EXDEV
	}
	if d.bind.Messages {
		return syscall.EPERM
	}
	c := d.child(name)
	_, err := d.dirOp(ctx, "link", c.path(), false, func(s *session, dir p9.File) error {
		_, tf, err := s.root.Walk(t.names())
		if err != nil {
			return err
		}
		defer tf.Close()
		return dir.Link(tf, name)
	})
	return err
}

// Symlink implements fs.Symlinker: Tsymlink on the server, the text
// stored as given. The node returned is the link itself (a bind that
// follows links shows its target at the next lookup).
func (d *remoteDir) Symlink(ctx context.Context, target, name string) (sfs.Node, error) {
	if d.bind.Messages {
		return nil, syscall.EPERM
	}
	c := d.child(name)
	var q p9.QID
	_, err := d.dirOp(ctx, "symlink", c.path(), false, func(s *session, dir p9.File) error {
		var err error
		q, err = dir.Symlink(target, name, 0, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.attr = &onceAttr{a: sfs.Attr{Mode: iofs.ModeSymlink | 0o777, Size: int64(len(target)), Ino: c.ino(q)}}
	return &remoteFile{c}, nil
}

// Readlink implements fs.Readlinker: Treadlink of the node's path.
func (f *remoteFile) Readlink(ctx context.Context) (string, error) {
	s, err := f.r.shared(ctx)
	if err != nil {
		return "", err
	}
	t, err := f.readlink(ctx, s)
	if err != nil {
		return "", f.r.refused(ctx, "readlink", f.path(), nil, err)
	}
	return t, nil
}
