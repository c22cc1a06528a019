package ctlfs

import (
	iofs "io/fs"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// sandboxTable is a sandbox's directory, /sandboxes/<id>/. The directory
// and everything in it, the guest's procs/ and fs/ included, belong to
// the sandbox's owner (ctl.Sandbox.Owner), as 9front's devproc gives a
// process's files to its user. Other users may read its state (ctl,
// status, wait) and nothing else: not its errors, output, console or
// guest files, and they may write nothing.
var sandboxTable = sfs.Table[*ctl.Sandbox]{
	{Name: "ctl", Mode: 0o644, New: newSandboxCtlFile},
	{Name: "status", Mode: 0o444, New: statusFile},
	{Name: "err", Mode: 0o400, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return errFile(s.Err, m) }},
	{Name: "wait", Mode: 0o444, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &waitFile{sb: s, mode: m} }},
	{Name: "exec", Mode: 0o600, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &execFile{sb: s, mode: m} }},
	{Name: "execstatus", Mode: 0o400, New: execStatusFile},
	{Name: "procs", Mode: iofs.ModeDir | 0o500, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return newGuestBind(s, "procs", m) }},
	{Name: "fs", Mode: iofs.ModeDir | 0o700, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return newGuestBind(s, "fs", m) }},
	{Name: "watch", Mode: 0o600, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &watchFile{sb: s, mode: m} }},
	{Name: "console", Mode: 0o400, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &consoleFile{sb: s, mode: m} }},
	{Name: "snapshots", Mode: iofs.ModeDir | 0o500, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &snapshotsDir{plane: s.Plane(), sb: s, mode: m} }},
	{Name: "worlds", Mode: iofs.ModeDir | 0o500, New: func(s *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &worldsDir{p: s.Plane(), sb: s, mode: m} }},
	{Name: "net", Mode: iofs.ModeDir | 0o500, New: newNetDir},
}
