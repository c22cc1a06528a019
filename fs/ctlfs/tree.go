package ctlfs

import (
	"log/slog"
	"os"

	sfs "sandfs/fs"

	"sandfs/ctl"
	"sandfs/ctl/cred"
)

// Tree is the sandfs file tree over one control plane.
type Tree struct {
	plane *ctl.Plane
	log   *slog.Logger
	owner cred.Owner // of the root and its files: the daemon's uid, the creators' gid
}

// New returns the tree of plane p. log may be nil (discard).
func New(p *ctl.Plane, log *slog.Logger) *Tree {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tree{plane: p, log: log, owner: cred.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}}
}

// SetGroup makes gid the group of the root's files: its members may
// write /ctl and open /clone, that is create sandboxes (sandfs serve
// --group). Without it the group is the daemon's own. Call it before
// Root.
func (t *Tree) SetGroup(gid uint32) { t.owner.GID = gid }

// Root returns the root directory.
func (t *Tree) Root() sfs.Dir {
	o := t.owner
	return rootTable.Dir(t, 0o555, &o)
}

// fail records a failed request on /ctl or /clone for /err (the plane's
// Err, which a snapshot's ctl also sets). ctl has already logged it.
func (t *Tree) fail(err error) { t.plane.SetErr(err) }

// Err is the text of /err, without newline.
func (t *Tree) Err() string { return t.plane.Err() }
