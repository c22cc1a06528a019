// Package ctl is the control plane of sandfs: the registry of sandboxes,
// their lifecycle state machines, their persisted records, and the ctl
// message grammar. The file tree (package fs) presents it; ctl never
// imports fs. The VMM plugs in through the Runtime interface.
//
// # What it owns
//
//   - The grammar (grammar.go, verbs.go, values.go): Parse turns one
//     message into a Command through a verb Table. It is pure (no I/O,
//     no state). GlobalVerbs is /ctl, SandboxVerbs is sandboxes/<id>/ctl
//     and an open /clone. Each verb is documented once, in its table,
//     whose row also holds the states it needs and its handler, so a
//     write is Parse, then the row's handler under the sandbox's lock.
//     The tokenizer, quoting and table type are package msg's (ctl/msg),
//     shared with the guest agent and the VMM's control socket.
//   - Errors (errors.go): one type, *Error{Errno, Text} (msg.Error);
//     Errno(err) maps any error for the transports. Text is
//     `verb: reason "input"`.
//     EINVAL malformed/unknown/bad value, EBUSY wrong state (the text
//     names the state needed), ENOENT no such sandbox (or snapshot,
//     world), EEXIST name taken, E2BIG message too long, ENODEV no
//     runtime configured, ENOTSUP not supported yet, ECANCELED a sandbox
//     killed while its new/start was creating it, ESTALE a snapshot over
//     a template image rebuilt since, EINTR/ETIMEDOUT the caller's
//     context ended, EIO anything unexpected (logged at error level).
//   - The Plane (plane.go) and its Sandboxes (sandbox.go): lifecycle,
//     status lines, err texts, wait/notification.
//   - Persistence (store.go): <stateDir>/sandboxes/<id>.json, one record
//     per sandbox not in state new, written atomically (temp file, fsync,
//     rename, fsync dir); <stateDir>/run/<id>/ is the runtime's private
//     directory (Spec.Dir); <stateDir>/lock is flock'ed by the open Plane.
//   - Snapshots (snapshots.go, snapstore.go): the registry of snapshots
//     (Plane.snaps, under Plane.mu), <stateDir>/snapshots/<snap>/, each
//     written whole then renamed (complete or absent); the snapshot and
//     rollback verbs of a sandbox, new from=, rm on a snapshot's ctl
//     (SnapshotVerbs). A Machine takes them (Snapshotter), a Runtime
//     restores them (SnapshotRestorer); the VMM's in vmmsnap.go.
//   - Worlds (worlds.go, worldstore.go, worldattach.go): the registry of
//     worlds (Plane.wr, under its own leaf lock), <stateDir>/worlds/<w>/
//     (record and data, made and removed by rename), the world verb of
//     /ctl and WorldVerbs; their data (package world) is reached through
//     WorldBackend, opened by the daemon's WorldOpener. A started
//     sandbox with a world serves it to its guest on vsock port
//     WorldPort (GuestListener) and has the agent mount it at
//     /workspace (docs/worlds.md).
//
// # Lifecycle
//
// See State for the diagram and the transition table. A sandbox is made
// either by `new` on /ctl (created and started in one write) or by opening
// /clone (Plane.Clone: state new, configured by template/mem/cpus/world/
// timeout writes, then `start`). Creation is asynchronous inside the Plane
// (creating → running, or dead with the reason in err) but both `new` and
// `start` writes wait for its outcome, so a script's write fails exactly
// when the sandbox did not come up; if the writer's context ends first,
// the write returns EINTR and creation goes on. `kill` waits until the
// sandbox is dead. Dead sandboxes stay listed, with their err, until `rm
// <id>` on /ctl removes the record. A sandbox in state new lives as long
// as the /clone handle that reserved it (Release), or until kill/rm; it
// is never persisted.
//
// # Invariants
//
//   - Bad input changes nothing: every message is parsed and validated
//     completely before any state changes.
//   - Every failed request leaves its text in the nearest err (the
//     sandbox's Err, or the Plane's Err for /ctl and /clone) and in the
//     log, because transports carry only the errno.
//   - The record on disk is written before a state is reported, so a
//     daemon killed at any point restarts with a state the sandbox really
//     went through. (If the write itself fails, the request fails with
//     EIO, logged; after pause/resume the in-memory state still follows
//     the machine.) A temp file from an interrupted write is ignored and
//     removed at Open; the previous record survives.
//   - Version grows on every state change; a sandbox's State only moves
//     along the transition table.
//
// # Restart
//
// Open loads every record (restart.go). Sandboxes recorded as running,
// paused or stopping are re-attached if the Runtime implements
// Reattacher and succeeds (a stopping one is then stopped, a running or
// paused one is resumed or paused to match its record, a deadline that
// passed while the daemon was away fires at once); otherwise, and always
// for creating, they are dead with err "daemon restarted" (followed by
// the reason when Reattach failed). A Runtime that is also a Reaper ends
// the machines no sandbox gets back: those of sandboxes recorded dead or
// creating, of corrupt records, and of run directories no record names
// (which are then removed). The VMM runtime does both (vmm_adopt.go):
// its VMMs outlive the daemon, even a kill -9. Corrupt
// records are logged and skipped (never deleted; their ids stay taken).
//
// # Lock order
//
//	Sandbox.op → Plane.mu → Sandbox.mu
//
// worldReg.mu (the worlds) is a leaf: no other lock is taken under it.
// It is held across a world's creation, first opening and removal (disk
// work: a large upper's removal blocks other world lookups meanwhile),
// never across Apply, Discard or Rebase.
//
// Sandbox.op serializes the operations on one sandbox (configure, start,
// pause, resume, kill, rm, timeouts) and is the only lock held while
// calling the Runtime or a Machine. Plane.mu guards the registry (map,
// order, last error, watchers). Sandbox.mu guards a sandbox's fields and
// is held only briefly; Status, Err, State and Version take only it, so
// reads never wait for a slow runtime call. Watch callbacks run with no
// lock held.
//
// # Lifetimes
//
// A *Sandbox handle stays valid forever; after rm its State is removed
// and its Ctl fails with ENOENT. Machines outlive Plane.Close (for
// re-attach). Background goroutines (creation, the per-machine watcher,
// timeout timers) end by Close.
package ctl
