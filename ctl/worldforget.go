package ctl

import (
	"context"
	"sync"
	"time"
)

// forgetWait bounds a guest's "forget" (its agent drops its caches).
const forgetWait = 30 * time.Second

// worldChanged tells the guests that may have cached world name's union
// that it changed under them (their /workspace is mounted cache=loose,
// guest.ForgetWorkspace): the guests of the sandboxes attached to name,
// and with lowerToo those of every world over the same lower (an apply
// wrote into it). A running guest's agent gets "forget" now, all of them
// in parallel, and worldChanged returns when they have answered; a
// paused sandbox's guest gets it at its resume (resumedWorld). A guest
// that does not answer is logged, not an error of the change.
func (p *Plane) worldChanged(ctx context.Context, name string, lowerToo bool) {
	wi, err := p.LookupWorld(name)
	if err != nil {
		return
	}
	p.pruneStale()
	ctx, cancel := context.WithTimeout(ctx, forgetWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range p.Sandboxes() {
		w := s.Config().World
		if w == "" {
			continue
		}
		if w != name {
			o, err := p.LookupWorld(w)
			if !lowerToo || err != nil || o.Lower != wi.Lower {
				continue
			}
		}
		s.mu.Lock()
		st, m := s.state, s.m
		s.mu.Unlock()
		switch {
		case st == StateRunning && m != nil:
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.forgetWorld(ctx, m)
			}()
		case st == StatePaused:
			p.wr.mu.Lock()
			if p.wr.stale == nil {
				p.wr.stale = map[*Sandbox]bool{}
			}
			p.wr.stale[s] = true
			p.wr.mu.Unlock()
		}
	}
	wg.Wait()
}

// forgetWorld has m's agent drop its caches of /workspace.
func (s *Sandbox) forgetWorld(ctx context.Context, m Machine) {
	if err := agentSay(ctx, m, "forget"); err != nil {
		s.p.log.Warn("guest did not forget its cached world", "sandbox", s.id, "err", err)
	}
}

// resumedStale sends the "forget" a paused s missed (worldChanged). s
// runs again; op held.
func (s *Sandbox) resumedStale(ctx context.Context) {
	p := s.p
	p.wr.mu.Lock()
	stale := p.wr.stale[s]
	delete(p.wr.stale, s)
	p.wr.mu.Unlock()
	if stale && s.m != nil {
		ctx, cancel := context.WithTimeout(ctx, forgetWait)
		defer cancel()
		s.forgetWorld(ctx, s.m)
	}
}

// pruneStale forgets the dead sandboxes among those whose guest is to
// forget at resume (a dead one is not resumed). wr.mu is a leaf: the
// states are read outside it.
func (p *Plane) pruneStale() {
	p.wr.mu.Lock()
	var marked []*Sandbox
	for s := range p.wr.stale {
		marked = append(marked, s)
	}
	p.wr.mu.Unlock()
	for _, s := range marked {
		if s.State() == StateDead {
			p.wr.mu.Lock()
			delete(p.wr.stale, s)
			p.wr.mu.Unlock()
		}
	}
}
