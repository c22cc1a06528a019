package ninep

import (
	"context"
	"syscall"

	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

var (
	_ sfs.Setattrer = (*remoteFile)(nil)
	_ sfs.Setattrer = (*remoteDir)(nil)
)

// SetAttr implements fs.Setattrer: Tsetattr of mode, owner and times on
// the server (chmod, chown, utimes through a bind: a guest's fs/). A
// bind point itself and a Messages bind's files are EPERM.
func (d *remoteDir) SetAttr(ctx context.Context, c sfs.Change) error {
	if d.fixed != nil {
		return syscall.EPERM
	}
	return d.setattr(ctx, c)
}

// SetAttr implements fs.Setattrer (see remoteDir.SetAttr).
func (f *remoteFile) SetAttr(ctx context.Context, c sfs.Change) error { return f.setattr(ctx, c) }

func (n *remoteNode) setattr(ctx context.Context, c sfs.Change) error {
	if n.bind.Messages {
		return syscall.EPERM
	}
	m, a := toSetAttr(c)
	s, err := n.r.shared(ctx)
	if err != nil {
		return err
	}
	err = n.r.do(ctx, s, "setattr "+n.path(), true, nil, func() error {
		_, fl, err := s.root.Walk(n.names())
		if err != nil {
			return err
		}
		defer fl.Close()
		return fl.SetAttr(m, a)
	})
	if err != nil {
		return n.r.refused(ctx, "setattr", n.path(), nil, err)
	}
	return nil
}

// toSetAttr is the Tsetattr of c (the inverse of toChange): a zero time
// is the server's now.
func toSetAttr(c sfs.Change) (p9.SetAttrMask, p9.SetAttr) {
	var m p9.SetAttrMask
	var a p9.SetAttr
	if c.Mode != nil {
		m.Permissions, a.Permissions = true, toP9Mode(*c.Mode)&0o7777
	}
	if c.UID != nil {
		m.UID, a.UID = true, p9.UID(*c.UID)
	}
	if c.GID != nil {
		m.GID, a.GID = true, p9.GID(*c.GID)
	}
	if c.Atime != nil {
		m.ATime = true
		if !c.Atime.IsZero() {
			m.ATimeNotSystemTime = true
			a.ATimeSeconds, a.ATimeNanoSeconds = uint64(c.Atime.Unix()), uint64(c.Atime.Nanosecond())
		}
	}
	if c.Mtime != nil {
		m.MTime = true
		if !c.Mtime.IsZero() {
			m.MTimeNotSystemTime = true
			a.MTimeSeconds, a.MTimeNanoSeconds = uint64(c.Mtime.Unix()), uint64(c.Mtime.Nanosecond())
		}
	}
	return m, a
}
