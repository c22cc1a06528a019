package ctl

// Snapshot retention (docs/snapshots.md "Retention"): rm never loses a
// snapshot another one depends on. A snapshot with deltas over it is
// marked removed (no longer listed, looked up or restored by name) and
// its files stay; once its last delta is removed it goes too, and so on
// up the chain. Open finishes what a killed daemon left (collectAll).

import (
	"context"
	"syscall"

	"sandfs/ctl/msg"
)

// rmSnap removes a snapshot (the rm verb) that nothing is restoring from
// or taking a snapshot over: its files, or, while deltas are over it,
// only its listing (Removed).
func (p *Plane) rmSnap(ctx context.Context, c Command, v *Verb) error {
	return msg.Prefix(v.Name, p.removeSnap(c.Snap, func(si SnapshotInfo) error { return mayUseSnap(ctx, v.Name, si) }))
}

// removeSnap removes listed snapshot id as rm does (rmSnap; retention
// rules too) if may (nil: anyone) allows it: EBUSY while in use, ENOENT
// if not listed.
func (p *Plane) removeSnap(id string, may func(SnapshotInfo) error) error {
	p.mu.Lock()
	si, ok := p.snaps[id]
	if !ok || si.Removed {
		p.mu.Unlock()
		return Errorf(syscall.ENOENT, "no snapshot %s", msg.Cite(id))
	}
	if may != nil {
		if err := may(si); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	if p.snapPins[si.ID] > 0 || p.snapBusy[si.ID] {
		p.mu.Unlock()
		return Errorf(syscall.EBUSY, "snapshot %s is in use (a snapshot over it or a restore from it)", msg.Cite(si.ID))
	}
	if p.hasChildLocked(si.ID) {
		p.snapBusy[si.ID] = true // while its record is rewritten
		p.mu.Unlock()
		gone := si
		gone.Removed = true
		err := p.st.snapRewrite(gone)
		p.mu.Lock()
		if err == nil {
			p.snaps[si.ID] = gone
		}
		delete(p.snapBusy, si.ID)
		p.mu.Unlock()
		if err != nil {
			return Errorf(syscall.EIO, "marking snapshot %s removed: %v", msg.Cite(si.ID), err)
		}
		p.log.Info("snapshot removed from the listing; kept for the snapshots over it", "snapshot", si.ID)
		return nil
	}
	if err := p.removeSnapLocked(si); err != nil {
		return Errorf(syscall.EIO, "removing snapshot %s: %v", msg.Cite(si.ID), err)
	}
	p.collect(si.Parent)
	return nil
}

// hasChildLocked reports whether a snapshot (listed or removed) is a
// delta over id. Plane.mu held.
func (p *Plane) hasChildLocked(id string) bool {
	for _, o := range p.snaps {
		if o.Parent == id {
			return true
		}
	}
	return false
}

// removeSnapLocked deletes si's files, called with Plane.mu held, which
// it releases. The name stays taken until they are gone; on failure si
// stays (if its directory does).
func (p *Plane) removeSnapLocked(si SnapshotInfo) error {
	delete(p.snaps, si.ID)
	p.snapBusy[si.ID] = true
	p.mu.Unlock()
	err := p.st.snapRemove(si.ID)
	p.mu.Lock()
	if err != nil && !p.snapGone(si.ID) {
		p.snaps[si.ID] = si // still there
	}
	delete(p.snapBusy, si.ID)
	p.mu.Unlock()
	return err
}

// collect removes snapshot id, then its parent, and so on, while each
// is marked removed, has no delta over it left and is not in use.
// Failures are logged (the next Open tries again).
func (p *Plane) collect(id string) {
	for id != "" {
		p.mu.Lock()
		si, ok := p.snaps[id]
		if !ok || !si.Removed || p.hasChildLocked(id) || p.snapPins[id] > 0 || p.snapBusy[id] {
			p.mu.Unlock()
			return
		}
		if err := p.removeSnapLocked(si); err != nil {
			p.log.Error("cannot remove a removed snapshot no other one needs", "snapshot", id, "err", err)
			return
		}
		p.log.Info("removed snapshot collected: no snapshot over it left", "snapshot", id)
		id = si.Parent
	}
}

// collectAll collects every removed snapshot that nothing needs (a
// daemon killed between the removal of a delta and its parent's).
func (p *Plane) collectAll() {
	p.mu.Lock()
	var ids []string
	for id, si := range p.snaps {
		if si.Removed {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.collect(id)
	}
}
