package ctl

import (
	"context"
	"log/slog"
	"syscall"
)

// Plane is the control plane: the registry of sandboxes, their state
// machines and their persisted records under one state directory. All
// methods are safe for concurrent use.
type Plane struct {
	dir string
	rt  Runtime
	log *slog.Logger
}

// Open opens (creating if needed) the state directory dir, takes its lock
// (EBUSY if another Plane, in this or another process, holds it) and
// loads the recorded sandboxes. Records of sandboxes that were creating,
// running, paused or stopping are re-attached through rt if it implements
// Reattacher, otherwise they come back dead with err "daemon restarted".
// Corrupt records are logged and skipped, never deleted (their ids stay
// taken). rt may be nil: everything works except creating sandboxes,
// which fails with ENODEV. log may be nil (discard).
func Open(dir string, rt Runtime, log *slog.Logger) (*Plane, error) {
	return nil, Errorf(syscall.ENOTSUP, "open: not implemented yet")
}

// Close stops timers and background work and releases the state directory
// lock. Machines are not stopped: a later Open may re-attach them.
// Sandbox handles stay readable; their ctl writes fail.
func (p *Plane) Close() error { return nil }

// Ctl executes one message written to /ctl (GlobalVerbs). reply is what a
// read of the same open file should return next (for new: the id and a
// newline), "" for verbs with nothing to say. A failure's text becomes
// the plane's Err and is logged.
func (p *Plane) Ctl(ctx context.Context, msg []byte) (reply string, err error) {
	return "", Errorf(syscall.ENOTSUP, "ctl: not implemented yet")
}

// Err returns the text of the last failed request on /ctl or /clone, ""
// if none (the content of /err, without newline).
func (p *Plane) Err() string { return "" }

// Clone reserves a new sandbox in state new, with a generated id and the
// default config, for an open of /clone. The handle's writes go to the
// sandbox's Ctl (configure verbs, then start); call Release when the
// handle is closed. A failure's text becomes the plane's Err.
func (p *Plane) Clone(ctx context.Context) (*Sandbox, error) {
	return nil, Errorf(syscall.ENOTSUP, "clone: not implemented yet")
}

// Sandboxes returns the listed sandboxes (every state but removed) in a
// stable order: by creation time, then id.
func (p *Plane) Sandboxes() []*Sandbox { return nil }

// Lookup returns the sandbox with id, or an ENOENT *Error.
func (p *Plane) Lookup(id string) (*Sandbox, error) {
	return nil, Errorf(syscall.ENOENT, "lookup: no sandbox %s", quote(id))
}

// Watch registers fn to be called after every change of the sandbox list
// or of a sandbox's state (id is the sandbox concerned). fn is called
// without any ctl lock held, from the goroutine that made the change; it
// must not block for long. stop unregisters fn.
func (p *Plane) Watch(fn func(id string)) (stop func()) { return func() {} }
