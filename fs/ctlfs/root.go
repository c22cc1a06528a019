package ctlfs

import (
	iofs "io/fs"

	sfs "sandfs/fs"
)

// rootTable is the root directory. Its files belong to the daemon's user
// and the creators' group (Tree.SetGroup): the group may write /ctl and
// open /clone (an open of any kind reserves a sandbox, so others may not
// even read it); others may read /ctl's usage and list the sandboxes.
var rootTable = sfs.Table[*Tree]{
	{Name: "ctl", Mode: 0o664, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &ctlFile{t: t, mode: m} }},
	{Name: "clone", Mode: 0o660, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &cloneFile{t: t, mode: m} }},
	{Name: "err", Mode: 0o440, New: func(t *Tree, m iofs.FileMode) sfs.Node { return errFile(t.Err, m) }},
	{Name: "sandboxes", Mode: iofs.ModeDir | 0o555, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &sandboxesDir{t: t, mode: m} }},
	{Name: "templates", Mode: iofs.ModeDir | 0o555, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &templatesDir{plane: t.plane, mode: m} }},
	{Name: "snapshots", Mode: iofs.ModeDir | 0o555, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &snapshotsDir{plane: t.plane, mode: m} }},
	{Name: "worlds", Mode: iofs.ModeDir | 0o555, New: func(t *Tree, m iofs.FileMode) sfs.Node { return &worldsDir{p: t.plane, mode: m} }},
}
