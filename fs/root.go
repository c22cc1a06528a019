package fs

import iofs "io/fs"

// rootTable is the root directory. Its files belong to the daemon's user
// and the creators' group (Tree.SetGroup): the group may write /ctl and
// open /clone (an open of any kind reserves a sandbox, so others may not
// even read it); others may read /ctl's usage and list the sandboxes.
var rootTable = Table[*Tree]{
	{"ctl", 0o664, func(t *Tree, m iofs.FileMode) Node { return &ctlFile{t: t, mode: m} }},
	{"clone", 0o660, func(t *Tree, m iofs.FileMode) Node { return &cloneFile{t: t, mode: m} }},
	{"err", 0o440, func(t *Tree, m iofs.FileMode) Node { return &errFile{text: t.Err, mode: m} }},
	{"sandboxes", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return &sandboxesDir{t: t, mode: m} }},
	{"templates", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
	{"snapshots", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
	{"worlds", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
}
