// Package ctlfs is sandfs's file tree: the node model of package fs
// presenting the control plane (package ctl), one file per file kind.
// Adapters serve it (fs/ninep, fs/fusefs); docs/filesystem.md describes
// every file.
//
//	/ctl                          ctlFile        global verbs; read: help, or the reply to the last write
//	/clone                        cloneFile      open: reserve a sandbox; read: its id; write: its ctl
//	/err                          errFile        last failed request on /ctl or /clone
//	/sandboxes/                   sandboxesDir   one directory per sandbox
//	/sandboxes/<id>/ctl           sandboxCtlFile verbs; read: "<id> <state>"
//	/sandboxes/<id>/status        statusFile     one line, fixed field order
//	/sandboxes/<id>/err           errFile        last failed request on this sandbox
//	/sandboxes/<id>/wait          waitFile       blocks until the state changes, then one line
//	/sandboxes/<id>/exec          execFile       write: a shell command; read: its output until it exits
//	/sandboxes/<id>/execstatus    execStatusFile status line of the last exec (procs/<n>/status)
//	/sandboxes/<id>/procs/        newGuestBind   the guest agent's procs/, bound (guest.go)
//	/sandboxes/<id>/fs/           newGuestBind   the guest agent's fs/, bound (guest.go)
//	/sandboxes/<id>/watch         watchFile      each open: one inotify watch in the guest (the agent's watch)
//	/sandboxes/<id>/console       consoleFile    the VMM's serial log, read-only
//	/sandboxes/<id>/snapshots/    snapshotsDir   the snapshots taken of it (same nodes as /snapshots/<snap>/)
//	/sandboxes/<id>/worlds/       worldsDir      the world attached to it (same node as /worlds/<w>/)
//	/sandboxes/<id>/net/          netTable       (net.go)
//	/sandboxes/<id>/net/policy    netPolicyFile  its egress policy; write: replace it
//	/sandboxes/<id>/net/addr      netAddrFile    its addresses, one line
//	/sandboxes/<id>/net/audit     netAuditFile   a stream of connections and DNS answers, allowed or refused
//	/sandboxes/<id>/net/ports     netPortsFile   write: expose|unexpose <port>; read: the ports exposed
//	/snapshots/                   snapshotsDir   every snapshot; it outlives its sandbox
//	/snapshots/<snap>/info        snapInfoFile   one line, fixed field order
//	/snapshots/<snap>/ctl         snapCtlFile    verbs (rm); read: its id
//	/templates/                   templatesDir   one directory per template (templates.go)
//	/templates/<t>/info           tmplInfoFile   one line: image size, shapes
//	/templates/<t>/shapes         tmplShapesFile one line per shape built
//	/templates/<t>/log            tmplLogFile    the newest shape's build log
//	/templates/<t>/policy         tmplPolicyFile the egress policy its sandboxes start with
//	/worlds/                      worldsDir      every world (worlds.go)
//	/worlds/<w>/ctl               worldCtlFile   verbs (apply [force], discard, rebase, rm)
//	/worlds/<w>/lower             worldLowerFile the host directory it is over
//	/worlds/<w>/fs/               worldFSDir     the union, read and write
//	/worlds/<w>/upper/            worldUpperDir  its changes as a read-only directory
//	/worlds/<w>/diff              worldDiffFile  its changes, one a line
//	/worlds/<w>/status            worldStatusFile one line, fixed field order
//
// Adding a file kind: write one file with its type (a fs.Source for text,
// a fs.Sink for messages, a fs.Opener for per-open state), then add one
// row to its directory's table (rootTable in root.go, sandboxTable in
// sandbox.go).
//
// Lifetimes: a sandbox reserved by opening /clone lives as long as that
// open unless it was started (ctl's Release); a started sandbox lives
// until `kill` and `rm`. A handle on a removed sandbox keeps working for
// reads (state removed).
//
// Guest binds (guest.go): procs/ and fs/ are binds of one ninep.Remote
// per sandbox (guestLink), which ctl keeps and closes when the sandbox
// ends (Sandbox.GuestLink). The Remote's lock is a leaf, never held
// while it calls out (dial, Check, Fail), so ctl may close a link with
// the sandbox's lock held; guestLink.execMu and execHandle.mu are leaves
// too. The binds forward fs.Creator, fs.Mkdirer, fs.Remover and
// fs.Truncater, which the adapters use; other nodes refuse.
//
// Access: the root's files belong to the daemon's user and the creators'
// group (Tree.SetGroup, sandfs serve --group), who alone may write /ctl
// and open /clone; a sandbox's directory and everything under it, the
// guest's files included, belong to the uid and gid that created it
// (ctl.Sandbox.Owner), and fs.Chan checks every request against that.
// kill and rm on /ctl name a sandbox inside the message; ctl checks those
// (its owner or root).
//
// Lock order: Tree.mu and cloneHandle's are leaves; ctl's locks are taken
// only by calling into ctl, never while holding ours, except a
// fs.TextHandle's, held across Source.Text (which may call ctl).
package ctlfs
