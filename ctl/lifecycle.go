package ctl

// A sandbox's lifecycle, the verbs that move it between states: start
// (launch, create, attach to the machine and watch it), pause and resume,
// kill, remove (restore at daemon start is in restart.go). The handle,
// its status, err and wait are in sandbox.go.

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

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
	err := p.mayUseWorld(verb, s.Config().World, s.owner)
	var ver uint64
	if err == nil {
		ver, err = s.launch(v)
	}
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
	cfg := s.Config()
	if cfg.Net == "" {
		// No net= given: the template's policy, if it carries one.
		text, err := p.templatePolicy(verb, cfg.Template)
		if err != nil {
			return 0, err
		}
		cfg.Net = text
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	if err := p.giveUID(s, verb); err != nil {
		return 0, err
	}
	if err := s.forkWorld(verb); err != nil {
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
	var m Machine
	var err error
	if spec.From != "" {
		m, err = p.restoreNew(ctx, spec)
	} else {
		m, err = p.rt.Start(ctx, spec)
	}
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
	s.lastSnap = spec.From
	if s.state != StateStopping {
		if err := s.attachWorld(ctx, m); err != nil {
			p.log.Warn("sandbox's world not attached", "sandbox", s.id, "err", err)
			m.Stop(context.Background())
			s.die(errText(err), err)
			return
		}
	}
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
	if nm, ok := m.(Networked); ok {
		nm.SetAudit(s.audit.add) // net/audit (netaudit.go)
		s.reexpose(nm)           // net/ports (netports.go)
	}
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
	if s.state != StateStopping {
		// Nobody asked: a guest that powered off, or a VMM that died.
		attrs := []any{"sandbox", s.id, "why", why}
		if lw, ok := m.(interface{ LastWords() []any }); ok {
			attrs = append(attrs, lw.LastWords()...)
		}
		p.log.Warn("sandbox's machine ended unasked", attrs...)
	}
	s.die(why, nil)
	s.op.Unlock()
	p.notify(s.id)
}

// die records s as dead with err text why ("" keeps the last err). op held.
func (s *Sandbox) die(why string, startErr error) {
	if err := s.persist("dead", StateDead, func(r *record) {
		r.Deadline, r.Disk = time.Time{}, ""
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
		s.m, s.startErr, s.stopWhy, s.deadline, s.disk = nil, startErr, "", time.Time{}, ""
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	})
}

// pause parks s's vCPUs, then, where the machine and runtime can, writes
// it to disk and ends its machine (diskpause.go).
func (s *Sandbox) pause(ctx context.Context, c Command, v *Verb) error {
	s.op.Lock()
	defer func() { s.op.Unlock(); s.p.notify(s.id) }()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	if err := s.m.Pause(ctx); err != nil {
		return Errorf(Errno(err), "%s: %s", v.Name, errText(err))
	}
	if _, err := s.pauseToDisk(ctx, v.Name); err != nil {
		// The machine is there, paused: running again, nothing changed.
		rerr := s.m.Resume(s.p.ctx)
		if rerr == nil {
			return err
		}
		err = Errorf(Errno(err), "%s (resume: %s; sandbox left paused in memory)", errText(err), errText(rerr))
		if perr := s.persist(v.Name, StatePaused, nil); perr != nil {
			s.p.log.Error("sandbox paused but its record is stale", "sandbox", s.id, "err", perr)
		}
		s.setState(StatePaused, nil)
		return err
	}
	err := s.persist(v.Name, StatePaused, nil)
	s.setState(StatePaused, nil) // the machine did change state
	return err
}

// resume runs a paused s again: its vCPUs, or a restore of its image
// when it was paused to disk.
func (s *Sandbox) resume(ctx context.Context, c Command, v *Verb) error {
	s.op.Lock()
	onDisk := s.state == StatePaused && s.onDisk()
	if onDisk {
		defer func() { s.op.Unlock(); s.p.notify(s.id) }()
		return s.resumeFromDisk(ctx, v.Name)
	}
	s.op.Unlock()
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
	if to == StateRunning {
		s.resumedWorld(ctx)
		s.resumedStale(ctx)
	}
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
	// Logged: a sandbox that ends under a client's feet (an E2B
	// suite's, 2026-12-05) shows who ended it.
	s.p.log.Info("sandbox killed", "sandbox", s.id, "verb", verb, "state", s.state)
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
	if s.state == StatePaused && s.onDisk() { // no machine to stop
		s.die(why, nil)
		return nil
	}
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
	s.p.log.Info("sandbox removed", "sandbox", s.id, "verb", v.Name)
	return nil
}

// dropLocked unregisters s and marks it removed. op held; the record, if
// any, is already gone.
func (s *Sandbox) dropLocked() {
	s.p.unregister(s)
	s.setState(StateRemoved, nil)
}
