package guest

import (
	"context"
	iofs "io/fs"
	"time"

	sfs "sandfs/fs"
)

// rootTable is the agent's root directory (see the package doc):
//
//	ctl      agentCtlFile  machine-wide verbs (agentVerbs); read: boot and now
//	err      agentErrFile  text of the last failed ctl write
//	fs/      fsDir         the guest's file system (fsTree)
//	procs/   procsDir      processes
//	watch    watchFile     each open: one inotify watch of a directory
var rootTable = sfs.Table[*Server]{
	{Name: "ctl", Mode: 0o600, New: func(s *Server, m iofs.FileMode) sfs.Node { return &agentCtlFile{s: s, mode: m} }},
	{Name: "err", Mode: 0o444, New: func(s *Server, m iofs.FileMode) sfs.Node { return &agentErrFile{s: s, mode: m} }},
	{Name: "fs", Mode: iofs.ModeDir | 0o755, New: func(s *Server, _ iofs.FileMode) sfs.Node { return s.fs.rootNode() }},
	{Name: "procs", Mode: iofs.ModeDir | 0o555, New: func(s *Server, m iofs.FileMode) sfs.Node { return &procsDir{s: s, mode: m} }},
	{Name: "watch", Mode: 0o600, New: func(s *Server, m iofs.FileMode) sfs.Node { return &watchFile{s: s, mode: m} }},
}

// bootTime is when the agent started, shown by ctl and as the time of the
// synthetic files.
var bootTime = time.Now()

// rootNode is the node of fs/ itself, or one that fails with the reason
// the root cannot be reached.
func (t *fsTree) rootNode() sfs.Node {
	n, err := t.lookup("")
	if err != nil {
		return errNode{err}
	}
	return n
}

// errNode is a node that cannot be reached: every Stat fails with err.
type errNode struct{ err error }

// Stat implements sfs.Node.Stat.
func (e errNode) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{}, e.err }

// synthAttr is the Attr of a synthetic file or directory.
func synthAttr(mode iofs.FileMode) sfs.Attr {
	return sfs.Attr{Mode: mode.Type()&iofs.ModeDir | mode.Perm(), Mtime: bootTime}
}
