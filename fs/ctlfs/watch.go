package ctlfs

import (
	"context"
	iofs "io/fs"

	"sandfs/ctl"
	sfs "sandfs/fs"
)

// watchFile serves /sandboxes/<id>/watch, the guest agent's watch file
// (package guest, watch.go) bound in place: each open is one inotify
// watch in the guest, on a session of its own (a blocking read), ended
// when the file is closed. For example:
//
//	$ exec 3<>watch; echo 'watch /tmp recursive' >&3; cat <&3
//	create a.txt
//	write a.txt
//	remove a.txt
//
// Its Stat answers without the guest, so listing a sandbox never waits
// for it; a refused watch message leaves the agent's text in err.
type watchFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*watchFile)(nil)

// Stat implements sfs.Node.Stat.
func (f *watchFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements sfs.Opener: an open of the agent's watch.
func (f *watchFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	return sfs.Open(ctx, linkOf(f.sb).r.File(agentWatch), flags)
}

// agentWatch is the agent's watch file.
const agentWatch = "watch"
