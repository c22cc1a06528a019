// Package fs is sandfs's file tree, independent of any transport: the node
// model (Node, Dir, Opener, Source, Sink, Handle), directory tables, the
// text and message helpers, and one file per file kind of the tree that
// presents the control plane (package ctl). Adapters turn it into 9P
// (fs/ninep) and FUSE (fs/fusefs); see docs/filesystem.md for the files.
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
//	/sandboxes/<id>/procs/, fs/   guestDir       the guest agent's tree, bound (guest.go, guestnode.go)
//	/sandboxes/<id>/console       consoleFile    the VMM's serial log, read-only
//	/templates/ /snapshots/ /worlds/  EmptyDir   (registries to come)
//
// Adding a file kind: write one file with its type (a Source for text, a
// Sink for messages, an Opener for per-open state), then add one row to
// its directory's table (rootTable in root.go, sandboxTable in sandbox.go).
// A row may return any Dir, including a remote tree (ninep.Remote), which
// is how a guest agent's procs/ and fs/ will be bound into a sandbox.
//
// Lifetimes: nodes are cheap values made at every lookup and hold no
// per-open state; handles own what an open allocated. A sandbox reserved
// by opening /clone lives as long as that open unless it was started
// (ctl's Release); a started sandbox lives until `kill` and `rm`. A
// handle on a removed sandbox keeps working for reads (state removed).
//
// Blocking reads (wait) end when their context ends: the FUSE request is
// interrupted, the 9P read is flushed or its fid clunked, or the
// connection ends.
//
// Guest binds (guest.go): guestLink.mu is held while dialling the agent,
// which calls ctl (Sandbox.DialGuest, Fail); ctl never calls into fs, so
// that cannot deadlock. guestLink.execMu and guestHandle.mu are leaves.
// Mutable guest directories implement Creator, Mkdirer, Remover and
// Truncater (mutate.go), which the adapters use; other nodes refuse.
//
// Access (chan.go): every node shows an owner, a group and a mode
// (Attr; a node without an owner of its own is its directory's). The
// root's files belong to the daemon's user and the creators' group
// (Tree.SetGroup, sandfs serve --group), who alone may write /ctl and
// open /clone; a sandbox's directory and everything under it, the
// guest's files included, belong to the uid and gid that created it
// (ctl.Sandbox.Owner). The adapters reach nodes only through Chan, whose
// methods check the caller (ctl.CredOf of the request's context: the
// FUSE caller, the 9P connection's peer or token) against those modes,
// so both transports enforce one rule. kill and rm on /ctl name a
// sandbox inside the message; ctl checks those (its owner or root).
// In-process callers (Walk, Open) are the daemon and check nothing.
//
// Lock order: Tree.mu, textHandle.mu and cloneHandle.mu are leaves; ctl's
// locks are taken only by calling into ctl, never while holding ours,
// except textHandle.mu, held across Source.Text (which may call ctl).
package fs
