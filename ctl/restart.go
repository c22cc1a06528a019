package ctl

// Daemon start: every sandbox loaded by Open is settled (its machine
// re-attached, or the sandbox declared dead), and machines that no
// sandbox will own again are ended (Reaper).

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// settleTimeout bounds the pause or resume that brings a re-attached
// machine to its recorded state.
const settleTimeout = 30 * time.Second

// restore settles a sandbox loaded by Open: states that had a machine are
// re-attached or declared dead (err "daemon restarted", with the reason
// when the runtime tried); the machine of a sandbox that is not
// re-attached is reaped; the timeout is re-armed.
func (s *Sandbox) restore() {
	p := s.p
	s.op.Lock()
	defer s.op.Unlock()
	switch s.state {
	case StateRunning, StatePaused, StateStopping:
	case StateCreating:
		s.restartDead("daemon restarted", Errorf(syscall.ECANCELED, "was creating"))
		return
	default:
		p.reap(s.id) // dead: whatever still runs there (a kill cut short)
		return
	}
	if s.state == StatePaused && s.onDisk() {
		// Paused to disk: no machine to find. One that the daemon had
		// not yet ended when it died (its image was durable) is ended.
		p.reap(s.id)
		s.mu.Lock()
		s.armLocked()
		s.mu.Unlock()
		return
	}
	m, why, err := s.reattach()
	if err != nil {
		s.restartDead(why, err)
		return
	}
	s.mu.Lock()
	s.disk = "" // a resume from disk that had started its machine
	s.mu.Unlock()
	s.attach(m)
	if s.state == StateStopping {
		if err := m.Stop(p.ctx); err != nil {
			p.log.Error("cannot stop re-attached machine", "sandbox", s.id, "err", err)
		}
		return
	}
	// The daemon may have died between the machine's pause or resume
	// and the record of it: the record is what was reported.
	call, verb := Machine.Resume, "resume"
	if s.state == StatePaused {
		call, verb = Machine.Pause, "pause"
	}
	ctx, cancel := context.WithTimeout(p.ctx, settleTimeout)
	defer cancel()
	if err := call(m, ctx); err != nil {
		p.log.Warn("re-attached machine cannot be brought to its recorded state", "sandbox", s.id, "state", s.state, "err", err)
		if err := s.stopLocked(p.ctx, "restart", "daemon restarted: "+verb+": "+errText(err)); err != nil {
			p.log.Error("cannot stop re-attached machine", "sandbox", s.id, "err", err)
		}
		return
	}
	s.worldLost()
	s.mu.Lock()
	s.armLocked()
	s.mu.Unlock()
}

// reattach asks the runtime for s's machine. why is the err text for a
// failure. op held.
func (s *Sandbox) reattach() (m Machine, why string, err error) {
	p := s.p
	ra, ok := p.rt.(Reattacher)
	if !ok || p.rt == nil {
		return nil, "daemon restarted", Errorf(syscall.ENOTSUP, "runtime cannot re-attach")
	}
	spec := Spec{ID: s.id, Config: s.cfg.Defaults(), Dir: p.st.runDir(s.id), UID: s.uid, Last: s.lastSnap}
	m, err = ra.Reattach(p.ctx, spec)
	if err == nil && m == nil {
		err = Errorf(syscall.EIO, "runtime returned no machine")
	}
	if err != nil {
		return nil, "daemon restarted: " + errText(err), err
	}
	return m, "", nil
}

// restartDead records s, loaded by Open with a machine it does not get
// back, as dead with err why, and reaps what may run in its directory.
// op held.
func (s *Sandbox) restartDead(why string, err error) {
	s.p.log.Info("sandbox did not survive the restart", "sandbox", s.id, "state", s.state, "err", err)
	s.p.reap(s.id)
	// Bypass the table: this is a fresh start, not a transition.
	s.state = StateStopping
	s.die(why, nil)
}

// reap ends what the runtime may still run in sandbox id's run directory
// (Reaper), and logs a failure.
func (p *Plane) reap(id string) {
	r, ok := p.rt.(Reaper)
	if !ok || p.rt == nil {
		return
	}
	if err := r.Reap(p.st.runDir(id)); err != nil {
		p.log.Error("cannot end the machine of a sandbox that is not re-attached", "sandbox", id, "err", err)
	}
}

// reapStrays reaps the run directories that no loaded record names:
// those of corrupt records (kept, as the records are) and the rest,
// which are then removed (a sandbox whose record was removed, or never
// written, when the daemon died). Without a Reaper they stay.
func (p *Plane) reapStrays() {
	if _, ok := p.rt.(Reaper); !ok || p.rt == nil {
		return
	}
	ents, err := os.ReadDir(filepath.Join(p.st.dir, runName))
	if err != nil {
		p.log.Error("cannot list run directories", "err", err)
		return
	}
	for _, e := range ents {
		id := e.Name()
		if p.boxes[id] != nil || !e.IsDir() {
			continue
		}
		p.reap(id)
		if p.taken[id] {
			continue // a corrupt record's: kept with it
		}
		p.log.Info("removing the run directory of a sandbox with no record", "dir", p.st.runDir(id))
		if err := os.RemoveAll(p.st.runDir(id)); err != nil {
			p.log.Error("cannot remove run directory", "dir", p.st.runDir(id), "err", err)
		}
	}
}
