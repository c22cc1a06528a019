package fs

import (
	iofs "io/fs"

	"sandfs/ctl"
)

// sandboxTable is a sandbox's directory, /sandboxes/<id>/. The directory
// and everything in it, the guest's procs/ and fs/ included, belong to
// the sandbox's owner (ctl.Sandbox.Owner), as 9front's devproc gives a
// process's files to its user. Other users may read its state (ctl,
// status, wait) and nothing else: not its errors, output, console or
// guest files, and they may write nothing.
var sandboxTable = Table[*ctl.Sandbox]{
	{"ctl", 0o644, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &sandboxCtlFile{sb: s, mode: m} }},
	{"status", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &statusFile{sb: s, mode: m} }},
	{"err", 0o400, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &errFile{text: s.Err, mode: m} }},
	{"wait", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &waitFile{sb: s, mode: m} }},
	{"exec", 0o600, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &execFile{sb: s, mode: m} }},
	{"execstatus", 0o400, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &execStatusFile{sb: s, mode: m} }},
	{"procs", iofs.ModeDir | 0o500, func(s *ctl.Sandbox, m iofs.FileMode) Node { return newGuestBind(s, "procs", m) }},
	{"fs", iofs.ModeDir | 0o700, func(s *ctl.Sandbox, m iofs.FileMode) Node { return newGuestBind(s, "fs", m) }},
	{"console", 0o400, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &consoleFile{sb: s, mode: m} }},
}
