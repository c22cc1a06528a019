package ctl

import (
	"context"
	"syscall"
)

// Sandbox is one sandbox's control handle. It stays valid after the
// sandbox is removed (State then reports removed, Ctl fails with ENOENT).
// All methods are safe for concurrent use.
type Sandbox struct {
	p  *Plane
	id string
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// State returns the current lifecycle state.
func (s *Sandbox) State() State { return StateRemoved }

// Config returns the sandbox's settings (defaults filled in).
func (s *Sandbox) Config() Config { return Config{}.Defaults() }

// Ctl executes one message written to sandboxes/<id>/ctl or to an open
// /clone (SandboxVerbs). A failure's text becomes the sandbox's Err and is
// logged.
func (s *Sandbox) Ctl(ctx context.Context, msg []byte) error {
	return Errorf(syscall.ENOTSUP, "ctl: not implemented yet")
}

// Status returns the status line, without newline. Fields, in this fixed
// order (new fields are only ever appended):
//
//	id state template=<name> mem=<size> cpus=<n> world=<name|-> created=<unix> timeout=<dur|0> deadline=<unix|0> pid=<pid|0>
//
// e.g. "t1 running template=base mem=256M cpus=1 world=- created=1764423000 timeout=0 deadline=0 pid=4242".
func (s *Sandbox) Status() string { return "" }

// Err returns the text of the last failed request on this sandbox, or the
// reason it died, "" if none (the content of its err file, no newline).
func (s *Sandbox) Err() string { return "" }

// Version returns a counter that grows by at least one on every state
// change. A wait file captures it at open and calls WaitFrom with it, so
// the reader sees the next change after its open.
func (s *Sandbox) Version() uint64 { return 0 }

// WaitFrom blocks until the state has changed since version v (that is,
// Version() > v) or the sandbox has ended (dead or removed: a wait on
// an ended sandbox returns at once), then returns the status line. It
// returns ctx.Err() if ctx ends first.
func (s *Sandbox) WaitFrom(ctx context.Context, v uint64) (string, error) {
	return "", Errorf(syscall.ENOTSUP, "wait: not implemented yet")
}

// Wait is WaitFrom(ctx, s.Version()): it waits for the next change.
func (s *Sandbox) Wait(ctx context.Context) (string, error) {
	return s.WaitFrom(ctx, s.Version())
}

// Release is called when the /clone handle that reserved the sandbox is
// closed: a sandbox still in state new is removed (never started); any
// other state is left alone (a started sandbox lives until kill and rm).
func (s *Sandbox) Release() {}
