package ctl

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

// Sandbox is one sandbox's control handle. It stays valid after the
// sandbox is removed (State then reports removed, Ctl fails with ENOENT).
// All methods are safe for concurrent use.
type Sandbox struct {
	p       *Plane
	id      string
	created time.Time // immutable
	owner   Owner     // immutable: who created it

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
}

func newSandbox(p *Plane, id string, cfg Config, created time.Time, owner Owner) *Sandbox {
	return &Sandbox{p: p, id: id, created: created, owner: owner, state: StateNew, cfg: cfg, changed: make(chan struct{})}
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Owner returns who the sandbox belongs to: the uid and gid that created
// it (its files are theirs).
func (s *Sandbox) Owner() Owner { return s.owner }

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
//	id state template=<name> mem=<size> cpus=<n> world=<name|-> created=<unix> timeout=<dur|0> deadline=<unix|0> pid=<pid|0> limits=<cgroup2|cgroup1|none|->
//
// e.g. "t1 running template=base mem=256M cpus=1 world=- created=1764423000 timeout=0 deadline=0 pid=4242 limits=cgroup2".
// timeout is the configured duration; deadline is when it will kill the
// sandbox (0 when none or not running). limits says what confines the
// machine's resources (Limiter): a cgroup version, none (the host offers
// no usable cgroup controllers, or the daemon is not root), or - when
// there is no machine.
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
	return fmt.Sprintf("%s %s template=%s mem=%s cpus=%d world=%s created=%d timeout=%s deadline=%d pid=%d limits=%s",
		s.id, s.state, c.Template, FormatSize(c.MemBytes), c.CPUs, world, s.created.Unix(), formatTimeout(c.Timeout), deadline, pid, limits)
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
	err := s.ctl(ctx, msg)
	if err != nil {
		s.mu.Lock()
		s.err = err.Error()
		s.mu.Unlock()
		s.p.fail(s.id, msg, err)
	}
	return err
}

func (s *Sandbox) ctl(ctx context.Context, m []byte) error {
	c, v, err := parse(m, SandboxVerbs)
	if err != nil {
		return err
	}
	if s.p.isClosed() {
		return errClosed
	}
	return v.Run.sandbox(s, ctx, c, v)
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
		World: c.World, Timeout: int64(c.Timeout), Created: s.created, Deadline: s.deadline, Err: s.err, UID: s.uid}
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

func (s *Sandbox) ctlStart(ctx context.Context, c Command, v *Verb) error {
	return s.start(ctx, v, false)
}

// start creates the machine of a sandbox in state new and waits until it
// is running or has failed. v is the request's verb (start, or new on
// /ctl); fromNew means the sandbox was made by this same request (`new`),
// so a refusal before creation removes it again.
func (s *Sandbox) start(ctx context.Context, v *Verb, fromNew bool) error {
	p := s.p
	verb := v.Name
	ver, err := s.launch(v)
	if err != nil {
		if fromNew {
			s.Release()
		}
		return err
	}
	p.notify(s.id)
	// Wait for creating → running or dead (through stopping if killed).
	for {
		if _, err := s.WaitFrom(ctx, ver); err == errClosed {
			return err
		} else if err != nil {
			return Errorf(syscall.EINTR, "%s: interrupted; sandbox %s goes on creating", verb, msg.Cite(s.id))
		}
		s.mu.Lock()
		st, v2, serr := s.state, s.version, s.startErr
		s.mu.Unlock()
		switch st {
		case StateRunning, StatePaused:
			return nil
		case StateCreating, StateStopping:
			ver = v2
			continue
		}
		if serr == nil { // killed after the runtime had started it
			serr = errKilledCreating
		}
		return &Error{Errno: Errno(serr), Text: fmt.Sprintf("%s: sandbox %s failed to start: %s", verb, msg.Cite(s.id), errText(serr))}
	}
}

// errKilledCreating is why a sandbox killed while creating did not start.
var errKilledCreating = Errorf(syscall.ECANCELED, "killed while creating")

// launch moves s from new to creating (the state v needs) and starts the
// creation goroutine. It returns the version after the move.
func (s *Sandbox) launch(v *Verb) (uint64, error) {
	p := s.p
	verb := v.Name
	s.op.Lock()
	defer s.op.Unlock()
	if s.state != StateNew || !v.Allows(s.state) {
		return 0, s.busy(v)
	}
	if p.rt == nil {
		return 0, p.noRuntimeErr(verb)
	}
	s.mu.Lock()
	s.cfg = s.cfg.Defaults()
	s.mu.Unlock()
	if err := p.giveUID(s, verb); err != nil {
		return 0, err
	}
	spec := Spec{ID: s.id, Config: s.cfg, Dir: p.st.runDir(s.id), UID: s.uid}
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return 0, Errorf(syscall.EIO, "%s: %v", verb, err)
	}
	if err := s.persist(verb, StateCreating, nil); err != nil {
		os.RemoveAll(spec.Dir)
		return 0, err
	}
	ctx, cancel := context.WithCancel(p.ctx)
	s.setState(StateCreating, func() { s.cancel = cancel })
	ver := s.version // op held: no other change can happen
	p.wg.Add(1)
	go s.create(ctx, spec)
	return ver, nil
}

// create runs Runtime.Start and records its outcome.
func (s *Sandbox) create(ctx context.Context, spec Spec) {
	p := s.p
	defer p.wg.Done()
	m, err := p.rt.Start(ctx, spec)
	s.op.Lock()
	defer func() { s.op.Unlock(); p.notify(s.id) }()
	s.cancel = nil
	if p.isClosed() {
		// Leave the record as it is; the next Open decides (re-attach
		// or "daemon restarted"). The machine is not stopped.
		return
	}
	if err == nil && m == nil {
		err = Errorf(syscall.EIO, "runtime returned no machine")
	}
	if err != nil {
		p.log.Warn("sandbox failed to start", "sandbox", s.id, "err", err)
		if s.state == StateStopping {
			err = errKilledCreating
		}
		s.die(errText(err), err)
		return
	}
	s.attach(m)
	if s.state == StateStopping { // killed while creating
		if err := m.Stop(context.Background()); err != nil {
			p.log.Error("cannot stop machine of sandbox killed while creating", "sandbox", s.id, "err", err)
		}
		return
	}
	var deadline time.Time
	if s.cfg.Timeout != 0 {
		deadline = time.Now().Add(s.cfg.Timeout)
	}
	if err := s.persist("start", StateRunning, func(r *record) { r.Deadline = deadline }); err != nil {
		p.log.Error("sandbox running but its record is stale", "sandbox", s.id, "err", err)
	}
	s.setState(StateRunning, func() { s.deadline = deadline; s.armLocked() })
}

// attach makes m the sandbox's machine and watches for its end. op held.
func (s *Sandbox) attach(m Machine) {
	s.mu.Lock()
	s.m = m
	if cp, ok := m.(ConsolePather); ok {
		s.console = cp.ConsolePath()
	}
	s.mu.Unlock()
	s.p.wg.Add(1)
	go s.watch(m)
}

// watch waits for m to end and records the death.
func (s *Sandbox) watch(m Machine) {
	p := s.p
	defer p.wg.Done()
	select {
	case <-m.Done():
	case <-p.ctx.Done():
		return
	}
	s.op.Lock()
	if p.isClosed() || s.m != m {
		s.op.Unlock()
		return
	}
	why := s.stopWhy
	if s.state != StateStopping || why == "" {
		if err := m.Err(); err != nil {
			why = errText(err)
		} else if s.state != StateStopping {
			why = "machine ended"
		}
	}
	s.die(why, nil)
	s.op.Unlock()
	p.notify(s.id)
}

// die records s as dead with err text why ("" keeps the last err). op held.
func (s *Sandbox) die(why string, startErr error) {
	if err := s.persist("dead", StateDead, func(r *record) {
		r.Deadline = time.Time{}
		if why != "" {
			r.Err = why
		}
	}); err != nil {
		s.p.log.Error("sandbox dead but its record is stale", "sandbox", s.id, "err", err)
	}
	s.setState(StateDead, func() {
		if why != "" {
			s.err = why
		}
		s.m, s.startErr, s.stopWhy, s.deadline = nil, startErr, "", time.Time{}
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	})
}

func (s *Sandbox) pause(ctx context.Context, c Command, v *Verb) error {
	return s.pauseResume(ctx, v, StatePaused, Machine.Pause)
}

func (s *Sandbox) resume(ctx context.Context, c Command, v *Verb) error {
	return s.pauseResume(ctx, v, StateRunning, Machine.Resume)
}

// pauseResume calls the machine (in the state v needs) and moves s to to.
func (s *Sandbox) pauseResume(ctx context.Context, v *Verb, to State, call func(Machine, context.Context) error) error {
	s.op.Lock()
	defer func() { s.op.Unlock(); s.p.notify(s.id) }()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	if err := call(s.m, ctx); err != nil {
		return Errorf(Errno(err), "%s: %s", v.Name, errText(err))
	}
	err := s.persist(v.Name, to, nil)
	s.setState(to, nil) // the machine did change state
	return err
}

func (s *Sandbox) ctlKill(ctx context.Context, c Command, v *Verb) error {
	return s.kill(ctx, v)
}

// kill stops s and waits until it is dead. v is the request's verb.
func (s *Sandbox) kill(ctx context.Context, v *Verb) error {
	verb := v.Name
	s.op.Lock()
	switch s.state {
	case StateNew:
		s.dropLocked()
		s.op.Unlock()
		s.p.notify(s.id)
		return nil
	case StateRemoved:
		err := s.busy(v)
		s.op.Unlock()
		return err
	case StateDead:
		s.op.Unlock()
		return nil
	}
	err := s.stopLocked(ctx, verb, "")
	ver := s.version
	s.op.Unlock()
	s.p.notify(s.id)
	if err != nil {
		return err
	}
	for {
		if _, err := s.WaitFrom(ctx, ver); err == errClosed {
			return err
		} else if err != nil {
			return Errorf(syscall.EINTR, "%s: interrupted; sandbox %s is stopping", verb, msg.Cite(s.id))
		}
		if s.State().Ended() {
			return nil
		}
		ver = s.Version()
	}
}

// stopLocked moves s (creating, running, paused or stopping) to stopping
// and asks the machine to stop; the watcher records the death. why is
// the err text for the death ("" for an ordinary kill). op held.
func (s *Sandbox) stopLocked(ctx context.Context, verb, why string) error {
	if s.state != StateStopping {
		if err := s.persist(verb, StateStopping, nil); err != nil {
			return err
		}
		s.setState(StateStopping, func() { s.stopWhy = why })
	}
	if s.cancel != nil { // creating: create() stops the machine if any
		s.cancel()
		return nil
	}
	if s.m == nil {
		return nil
	}
	if err := s.m.Stop(ctx); err != nil {
		return Errorf(syscall.EIO, "%s: stopping %s: %s", verb, msg.Cite(s.id), errText(err))
	}
	return nil
}

// remove deletes the record of a sandbox in a state v allows (dead or new).
func (s *Sandbox) remove(v *Verb) error {
	s.op.Lock()
	defer func() { s.op.Unlock(); s.p.notify(s.id) }()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	if s.state != StateNew { // dead: it has a record
		if s.p.isClosed() {
			return errClosed
		}
		if err := s.p.st.remove(s.id); err != nil {
			return Errorf(syscall.EIO, "%s: removing %s: %v", v.Name, msg.Cite(s.id), err)
		}
	}
	s.dropLocked()
	return nil
}

// dropLocked unregisters s and marks it removed. op held; the record, if
// any, is already gone.
func (s *Sandbox) dropLocked() {
	s.p.unregister(s)
	s.setState(StateRemoved, nil)
}

// restore settles a sandbox loaded by Open: states that had a machine are
// re-attached or declared dead; the timeout is re-armed.
func (s *Sandbox) restore() {
	p := s.p
	s.op.Lock()
	defer s.op.Unlock()
	switch s.state {
	case StateCreating, StateRunning, StatePaused, StateStopping:
	default:
		return
	}
	var m Machine
	var err error = Errorf(syscall.ENOTSUP, "runtime cannot re-attach")
	if ra, ok := p.rt.(Reattacher); ok && p.rt != nil && s.state != StateCreating {
		spec := Spec{ID: s.id, Config: s.cfg.Defaults(), Dir: p.st.runDir(s.id), UID: s.uid}
		m, err = ra.Reattach(p.ctx, spec)
		if err == nil && m == nil {
			err = Errorf(syscall.EIO, "runtime returned no machine")
		}
	}
	if err != nil {
		p.log.Info("sandbox did not survive the restart", "sandbox", s.id, "state", s.state, "err", err)
		// Bypass the table: this is a fresh start, not a transition.
		s.state = StateStopping
		s.die("daemon restarted", nil)
		return
	}
	s.attach(m)
	if s.state == StateStopping {
		if err := m.Stop(p.ctx); err != nil {
			p.log.Error("cannot stop re-attached machine", "sandbox", s.id, "err", err)
		}
		return
	}
	s.mu.Lock()
	s.armLocked()
	s.mu.Unlock()
}
