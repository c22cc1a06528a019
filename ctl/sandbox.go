package ctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// Sandbox is one sandbox's control handle. It stays valid after the
// sandbox is removed (State then reports removed, Ctl fails with ENOENT).
// All methods are safe for concurrent use.
type Sandbox struct {
	p       *Plane
	id      string
	created time.Time  // immutable
	owner   cred.Owner // immutable: who created it

	// op serializes operations (configure, start, pause, resume, kill,
	// rm, timeout expiry, machine end) and is held across Runtime and
	// Machine calls and record writes. Lock order: op → Plane.mu → mu.
	op sync.Mutex

	// mu protects the following fields; held only briefly. They change
	// only with op held too, so op holders may read them without mu,
	// except err, which a failed request sets under mu alone.
	mu       sync.Mutex
	state    State
	cfg      Config // as given; Defaults applied at start
	deadline time.Time
	err      string             // last failure text or death reason
	version  uint64             // grows on every state change
	changed  chan struct{}      // closed and replaced on every state change
	m        Machine            // non-nil while running, paused, stopping
	timer    *time.Timer        // fires at deadline
	cancel   context.CancelFunc // cancels Runtime.Start while creating
	startErr error              // why the last start failed
	stopWhy  string             // err text for the coming death (timeout), "" for kill
	console  string             // console log of the last machine (ConsolePather), "" if none
	uid      int                // host uid/gid of its machine (Spec.UID), 0 none; set once, at the first launch, with Plane.mu held too
	link     io.Closer          // the tree's link to the guest (GuestLink), nil none; closed when the state ends
	audit    auditLog           // net/audit's lines (its own lock)
	// lastSnap is the snapshot its machine last took or was restored
	// from: the parent of its next snapshot, if still listed. op only.
	lastSnap string
	// disk is the image of a sandbox paused to disk (DiskPauser), whose
	// m is then nil; "" otherwise. Changed with op and mu held.
	disk string
	// ports are the guest ports exposed to the host (net/ports), given
	// to every new machine (netports.go). Changed with op and mu held.
	ports []Exposure
	// ending is the machine a pause to disk ended without waiting
	// (DiskPauser.Discard), until waitEnding saw it end. op only.
	ending Machine
	// forked is the world forkWorld made for it ("" none), which a
	// failed clone removes with it (dropFork). Changed with op and mu.
	forked string
	// dumped: its machine was asked for its state once already since
	// its guest stopped answering (stallDump). Protected by mu.
	dumped Machine
}

func newSandbox(p *Plane, id string, cfg Config, created time.Time, owner cred.Owner) *Sandbox {
	return &Sandbox{p: p, id: id, created: created, owner: owner, state: StateNew, cfg: cfg, changed: make(chan struct{})}
}

// Plane returns the control plane s belongs to.
func (s *Sandbox) Plane() *Plane { return s.p }

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Owner returns who the sandbox belongs to: the uid and gid that created
// it (its files are theirs).
func (s *Sandbox) Owner() cred.Owner { return s.owner }

// State returns the current lifecycle state.
func (s *Sandbox) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Config returns the sandbox's settings (defaults filled in).
func (s *Sandbox) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Defaults()
}

// Status returns the status line, without newline. Fields, in this fixed
// order (new fields are only ever appended):
//
//	id state template=<name> mem=<size> cpus=<n> world=<name|-> created=<unix> timeout=<dur|0> deadline=<unix|0> pid=<pid|0> limits=<cgroup2|cgroup1|none|-> boot=<restore|cold|->
//
// e.g. "t1 running template=base mem=256M cpus=1 world=- created=1764423000 timeout=0 deadline=0 pid=4242 limits=cgroup2 boot=restore".
// timeout is the configured duration; deadline is when it will kill the
// sandbox (0 when none or not running). limits says what confines the
// machine's resources (Limiter): a cgroup version, none (the host offers
// no usable cgroup controllers, or the daemon is not root), or - when
// there is no machine. boot says how the machine came up (Booter):
// restore (from its template's snapshot), cold (a kernel boot; a
// Machine without Booter counts as cold), or - when there is none.
func (s *Sandbox) Status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked()
}

func (s *Sandbox) statusLocked() string {
	c := s.cfg.Defaults()
	world := c.World
	if world == "" {
		world = "-"
	}
	var deadline int64
	if !s.deadline.IsZero() {
		deadline = s.deadline.Unix()
	}
	pid := 0
	if pm, ok := s.m.(Pider); ok {
		pid = pm.Pid()
	}
	limits := "-"
	if s.m != nil {
		limits = "none"
		if lm, ok := s.m.(Limiter); ok {
			limits = lm.Limits()
		}
	}
	boot := "-"
	if s.m != nil {
		boot = "cold"
		if bm, ok := s.m.(Booter); ok {
			boot = bm.Boot()
		}
	}
	return fmt.Sprintf("%s %s template=%s mem=%s cpus=%d world=%s created=%d timeout=%s deadline=%d pid=%d limits=%s boot=%s",
		s.id, s.state, c.Template, FormatSize(c.MemBytes), c.CPUs, world, s.created.Unix(), formatTimeout(c.Timeout), deadline, pid, limits, boot)
}

// Err returns the text of the last failed request on this sandbox, or the
// reason it died, "" if none (the content of its err file, no newline).
func (s *Sandbox) Err() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Version returns a counter that grows by at least one on every state
// change. A wait file captures it at open and calls WaitFrom with it, so
// the reader sees the next change after its open.
func (s *Sandbox) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// WaitFrom blocks until the state has changed since version v (that is,
// Version() > v) or the sandbox has ended (dead or removed: a wait on
// an ended sandbox returns at once), then returns the status line. It
// returns ctx.Err() if ctx ends first, and an EIO *Error if the Plane is
// closed meanwhile.
func (s *Sandbox) WaitFrom(ctx context.Context, v uint64) (string, error) {
	for {
		s.mu.Lock()
		if s.version > v || s.state.Ended() {
			line := s.statusLocked()
			s.mu.Unlock()
			return line, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", ctx.Err()
		case <-s.p.ctx.Done():
			return "", errClosed
		}
	}
}

// Wait is WaitFrom(ctx, s.Version()): it waits for the next change.
func (s *Sandbox) Wait(ctx context.Context) (string, error) {
	return s.WaitFrom(ctx, s.Version())
}

// Release is called when the /clone handle that reserved the sandbox is
// closed: a sandbox still in state new is removed (never started); any
// other state is left alone (a started sandbox lives until kill and rm).
func (s *Sandbox) Release() {
	s.op.Lock()
	if s.state == StateNew {
		s.dropLocked()
	}
	s.op.Unlock()
	s.p.notify(s.id)
}

// Ctl executes one message written to sandboxes/<id>/ctl or to an open
// /clone (SandboxVerbs). A failure's text becomes the sandbox's Err and is
// logged.
func (s *Sandbox) Ctl(ctx context.Context, msg []byte) error {
	_, err := s.CtlReply(ctx, msg)
	return err
}

// CtlReply is Ctl, also returning what a read of the same open should
// return next: "" for most verbs; the snapshot's name and a newline for
// snapshot.
func (s *Sandbox) CtlReply(ctx context.Context, msg []byte) (string, error) {
	reply, err := s.ctl(ctx, msg)
	if err != nil {
		s.mu.Lock()
		s.err = err.Error()
		s.mu.Unlock()
		s.p.fail(s.id, msg, err)
	}
	return reply, err
}

func (s *Sandbox) ctl(ctx context.Context, m []byte) (string, error) {
	c, v, err := parse(m, SandboxVerbs)
	if err != nil {
		return "", err
	}
	if s.p.isClosed() {
		return "", errClosed
	}
	if v.Run.reply != nil {
		return v.Run.reply(s, ctx, c, v)
	}
	return "", v.Run.sandbox(s, ctx, c, v)
}

// busy is the error for verb v refused in the current state: EBUSY naming
// the states v needs, or ENOENT once the sandbox is removed. op held.
func (s *Sandbox) busy(v *Verb) error {
	if s.state == StateRemoved {
		return Errorf(syscall.ENOENT, "%s: no sandbox %s (removed)", v.Name, msg.Cite(s.id))
	}
	return v.Refuse("sandbox "+msg.Cite(s.id), s.state)
}

// setState moves to state to, bumping the version and waking waiters.
// Called with op held; takes mu. Callers notify watchers after releasing
// op. A transition the table forbids is a bug: it is logged and done.
func (s *Sandbox) setState(to State, mut func()) {
	s.mu.Lock()
	if !CanGo(s.state, to) {
		s.p.log.Error("ctl: illegal state transition", "sandbox", s.id, "from", s.state, "to", to)
	}
	s.state = to
	if mut != nil {
		mut()
	}
	if to.Ended() && s.link != nil {
		s.link.Close() // before the end is reported (GuestLink)
		s.link = nil
	}
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// recordLocked returns the record for s in state st. op held; takes mu
// (err changes without op).
func (s *Sandbox) recordLocked(st State) record {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cfg.Defaults()
	return record{ID: s.id, Owner: s.owner, State: st, Template: c.Template, MemBytes: c.MemBytes, CPUs: c.CPUs,
		World: c.World, Net: c.Net, Group: c.Group, Member: c.Member, Timeout: int64(c.Timeout), Created: s.created, Deadline: s.deadline, Err: s.err, UID: s.uid,
		Disk: s.disk, LastSnap: s.lastSnap, Ports: slices.Clone(s.ports)}
}

// persist writes the record of s as it will be in state st. op held.
// After Close nothing is written (the next Open sees the last record).
func (s *Sandbox) persist(verb string, st State, mut func(r *record)) error {
	if s.p.isClosed() {
		return errClosed
	}
	r := s.recordLocked(st)
	if mut != nil {
		mut(&r)
	}
	if err := s.p.st.write(r); err != nil {
		return Errorf(syscall.EIO, "%s: saving state of %s: %v", verb, msg.Cite(s.id), err)
	}
	return nil
}

// configure applies template, mem, cpus or world: the setting c gives.
func (s *Sandbox) configure(ctx context.Context, c Command, v *Verb) error {
	s.op.Lock()
	defer s.op.Unlock()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	s.mu.Lock()
	s.cfg = s.cfg.with(c.Config)
	s.mu.Unlock()
	return nil
}

func (s *Sandbox) setTimeout(ctx context.Context, c Command, v *Verb) error {
	s.op.Lock()
	defer s.op.Unlock()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	d := c.Config.Timeout
	if s.state == StateNew || s.state == StateCreating {
		s.mu.Lock()
		s.cfg.Timeout = d
		s.mu.Unlock()
		if s.state == StateCreating {
			return s.persist(c.Verb, s.state, nil)
		}
		return nil
	}
	// Running or paused: the deadline counts from now.
	var deadline time.Time
	if d != 0 {
		deadline = time.Now().Add(d)
	}
	if err := s.persist(c.Verb, s.state, func(r *record) { r.Timeout, r.Deadline = int64(d), deadline }); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg.Timeout, s.deadline = d, deadline
	s.armLocked()
	s.mu.Unlock()
	return nil
}

// armLocked (re)starts the timeout timer for s.deadline. mu held.
func (s *Sandbox) armLocked() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.deadline.IsZero() {
		return
	}
	deadline := s.deadline
	s.timer = time.AfterFunc(time.Until(deadline), func() { s.expire(deadline) })
}

// expire kills s when its deadline passes (if it is still that deadline).
func (s *Sandbox) expire(deadline time.Time) {
	s.op.Lock()
	if s.p.isClosed() || !s.deadline.Equal(deadline) || (s.state != StateRunning && s.state != StatePaused) {
		s.op.Unlock()
		return
	}
	why := fmt.Sprintf("timeout: expired after %s", formatTimeout(s.cfg.Timeout))
	s.p.log.Info("sandbox timed out", "sandbox", s.id)
	err := s.stopLocked(context.Background(), "timeout", why)
	s.op.Unlock()
	if err != nil {
		s.p.fail(s.id, []byte("timeout"), err)
	}
	s.p.notify(s.id)
}
