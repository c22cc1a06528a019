package ninep

import (
	"context"
	"syscall"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

var _ sfs.Renamer = (*remoteDir)(nil)

// Rename implements fs.Renamer: Trenameat on the server, within one
// bind (EXDEV across binds or Remotes, as across mounts).
func (d *remoteDir) Rename(ctx context.Context, oldName string, newDir sfs.Node, newName string) error {
	nd, ok := newDir.(*remoteDir)
	if !ok || nd.r != d.r || nd.base != d.base || nd.bind != d.bind {
		return syscall.EXDEV
	}
	if d.bind.Messages {
		return syscall.EPERM
	}
	c := d.child(oldName)
	_, err := d.dirOp(ctx, "rename", c.path(), false, func(s *session, dir p9.File) error {
		_, to, err := s.root.Walk(nd.names())
		if err != nil {
			return err
		}
		defer to.Close()
		return dir.RenameAt(oldName, to, newName)
	})
	return err
}
