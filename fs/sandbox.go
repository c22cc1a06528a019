package fs

import (
	iofs "io/fs"

	"sandfs/ctl"
)

// sandboxTable is a sandbox's directory, /sandboxes/<id>/.
var sandboxTable = Table[*ctl.Sandbox]{
	{"ctl", 0o644, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &sandboxCtlFile{sb: s, mode: m} }},
	{"status", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &statusFile{sb: s, mode: m} }},
	{"err", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &errFile{text: s.Err, mode: m} }},
	{"wait", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &waitFile{sb: s, mode: m} }},
	{"exec", 0o666, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &execFile{sb: s, mode: m} }},
	{"execstatus", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &execStatusFile{sb: s, mode: m} }},
	{"procs", iofs.ModeDir | 0o555, func(s *ctl.Sandbox, m iofs.FileMode) Node { return newGuestBind(s, "procs", m) }},
	{"fs", iofs.ModeDir | 0o755, func(s *ctl.Sandbox, m iofs.FileMode) Node { return newGuestBind(s, "fs", m) }},
	{"console", 0o444, func(s *ctl.Sandbox, m iofs.FileMode) Node { return &consoleFile{sb: s, mode: m} }},
}
