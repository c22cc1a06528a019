package fs

import iofs "io/fs"

// rootTable is the root directory.
var rootTable = Table[*Tree]{
	{"ctl", 0o644, func(t *Tree, m iofs.FileMode) Node { return &ctlFile{t: t, mode: m} }},
	{"clone", 0o644, func(t *Tree, m iofs.FileMode) Node { return &cloneFile{t: t, mode: m} }},
	{"err", 0o444, func(t *Tree, m iofs.FileMode) Node { return &errFile{text: t.Err, mode: m} }},
	{"sandboxes", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return &sandboxesDir{t: t, mode: m} }},
	{"templates", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
	{"snapshots", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
	{"worlds", iofs.ModeDir | 0o555, func(t *Tree, m iofs.FileMode) Node { return EmptyDir{Mode: m} }},
}
