package ctl

// Retention rules (docs/snapshots.md "Retention"): snapshots beyond a
// count per sandbox, or older than an age, are removed as rm removes
// them (retention.go: one with deltas over it leaves the listing and its
// files stay for them), except those a sandbox still stands on: the one
// its machine last took or was restored from (the parent of its next
// delta) and the one a pause image of a sandbox paused to disk is over.
// A background pass applies them: at SetRetention, after each snapshot,
// and every retainPeriod.

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Retention is the daemon's snapshot retention configuration; a zero
// field is no limit.
type Retention struct {
	// Keep is the number of listed snapshots of each sandbox (by
	// sandbox id and owner, also after the sandbox is gone) that are
	// kept: the newest; older ones are removed.
	Keep int
	// MaxAge: listed snapshots created longer ago are removed.
	MaxAge time.Duration
}

func (r Retention) active() bool { return r.Keep > 0 || r.MaxAge > 0 }

// retainPeriod is the longest time between two retention passes.
const retainPeriod = time.Minute

// SetRetention sets the retention rules and starts applying them (once
// per Plane: later calls change the rules).
func (p *Plane) SetRetention(r Retention) {
	p.setRetention(func(Retention) Retention { return r })
}

// setRetention sets the rules to f of the rules in force (in one hold of
// Plane.mu: two retain verbs changing different keys both take effect)
// and starts applying them as SetRetention does.
func (p *Plane) setRetention(f func(Retention) Retention) {
	p.mu.Lock()
	r := f(p.retain)
	p.retain = r
	start := p.retainKick == nil && r.active() && !p.closed
	if start {
		p.retainKick = make(chan struct{}, 1)
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if start {
		go p.retainLoop()
	}
	p.kickRetention()
}

// kickRetention asks for a retention pass soon (after a snapshot).
func (p *Plane) kickRetention() {
	p.mu.Lock()
	k := p.retainKick
	p.mu.Unlock()
	if k != nil {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// retainRetry is the wait before another pass when one found a sandbox
// busy.
const retainRetry = time.Second

// retainLoop runs retention passes until the Plane closes.
func (p *Plane) retainLoop() {
	defer p.wg.Done()
	t := time.NewTimer(retainPeriod)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.retainKick:
		}
		_, busy := p.retainPass(time.Now())
		t.Stop()
		if busy {
			t.Reset(retainRetry)
		} else {
			t.Reset(retainPeriod)
		}
	}
}

// retainPass removes the snapshots the rules give up at now, and returns
// their ids. A sandbox whose operation lock is held (an operation in
// progress may be changing what it stands on) leaves everything for the
// next pass (busy).
func (p *Plane) retainPass(now time.Time) (gone []string, busy bool) {
	p.mu.Lock()
	r := p.retain
	boxes := p.sortedLocked()
	p.mu.Unlock()
	if !r.active() {
		return nil, false
	}
	kept := map[string]bool{}
	for _, s := range boxes {
		if !s.op.TryLock() {
			return nil, true
		}
		kept[s.lastSnap] = true
		s.mu.Lock()
		if f := strings.Fields(s.disk); len(f) >= 4 {
			kept[f[3]] = true // the pause image's root (SaveToDisk)
		}
		s.mu.Unlock()
		s.op.Unlock()
	}
	for _, si := range retainCandidates(p.Snapshots(), r, now) {
		if kept[si.ID] {
			continue
		}
		if err := p.removeSnap(si.ID, nil); err != nil {
			p.log.Warn("retention: snapshot not removed", "snapshot", si.ID, "err", err)
			continue
		}
		p.log.Info("retention: snapshot removed", "snapshot", si.ID, "sandbox", si.Sandbox, "created", si.Created.Unix())
		gone = append(gone, si.ID)
	}
	return gone, false
}

// retainCandidates are the listed snapshots (list: oldest first) that
// r gives up at now: beyond the newest r.Keep of their sandbox, or
// older than r.MaxAge.
func retainCandidates(list []SnapshotInfo, r Retention, now time.Time) []SnapshotInfo {
	type key struct {
		box string
		uid uint32
	}
	per := map[key][]SnapshotInfo{}
	for _, si := range list {
		k := key{si.Sandbox, si.Owner.UID}
		per[k] = append(per[k], si)
	}
	var out []SnapshotInfo
	for _, sis := range per {
		for i, si := range sis {
			old := r.MaxAge > 0 && now.Sub(si.Created) > r.MaxAge
			over := r.Keep > 0 && len(sis)-i > r.Keep
			if old || over {
				out = append(out, si)
			}
		}
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}
