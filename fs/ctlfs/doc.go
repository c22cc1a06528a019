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
//	/sandboxes/<id>/procs/, fs/   ninep.Remote   the guest agent's tree, bound (guest.go)
//	/sandboxes/<id>/watch         watchFile      each open: one inotify watch in the guest (the agent's watch)
//	/sandboxes/<id>/console       consoleFile    the VMM's serial log, read-only
//	/sandboxes/<id>/snapshots/    snapshotsDir   the snapshots taken of it (same nodes as /snapshots/<snap>/)
//	/snapshots/                   snapshotsDir   every snapshot; it outlives its sandbox
//	/snapshots/<snap>/info        snapInfoFile   one line, fixed field order
//	/snapshots/<snap>/ctl         snapCtlFile    verbs (rm); read: its id
//	/worlds/, <id>/worlds/        worldsDir      every world; the one attached to the sandbox
//	/worlds/<w>/                  worldTable     a world: ctl lower fs/ upper/ diff status (worlds.go)
//	/templates/                   templatesDir   (templates.go: <t>/info, shapes, log)
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
