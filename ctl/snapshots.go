package ctl

// Snapshots: the registry (Plane.snaps), the snapshot and rollback verbs
// of a sandbox, rm of a snapshot, and what a runtime implements for them.
// The files are in snapstore.go.

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

// Snapshotter is optionally implemented by a Machine that can take
// snapshots of itself.
type Snapshotter interface {
	// Snapshot writes a snapshot of the paused machine into dir (an
	// empty directory whose name is the snapshot's id, inside the
	// Plane's snapshot store): its memory and its disk layer as they
	// are now; the machine then goes on with a disk layer of its own.
	// With parent (a sibling of dir: the last snapshot this machine
	// took or was restored from, still listed) it may write a delta over
	// it; Parent in the result says what it wrote ("" full). ctx ends
	// only when the Plane closes.
	Snapshot(ctx context.Context, dir, parent string) (SnapshotStats, error)
}

// SnapshotStats is what a Snapshotter wrote.
type SnapshotStats struct {
	Parent               string // the snapshot the delta is over, "" for a full one
	DataBytes, DiskBytes uint64 // as in SnapshotInfo
	Boot                 string // SnapshotInfo.Boot
	// Base is set when the delta is over a snapshot the registry does
	// not list (a template's, named "_..."): its directory, which the
	// registry keeps beside the snapshot (snapBase) for restores.
	Base string
	// Took is where the machine's time went, for the log (diagnostics).
	Took snapshot.Timing
}

// SnapshotRestorer is optionally implemented by a Runtime that can start
// a machine from a snapshot (new from=, rollback).
type SnapshotRestorer interface {
	// Restore starts s's machine (as Runtime.Start does) from the
	// snapshot in from.Dir, with a disk layer of its own; s.Dir may hold
	// an earlier machine's files (a rollback: that machine has ended).
	Restore(ctx context.Context, s Spec, from SnapshotRef) (Machine, error)
}

// SnapshotRef is a snapshot a machine is restored from: its record and
// directory.
type SnapshotRef struct {
	SnapshotInfo
	Dir string
}

// Snapshots returns every listed snapshot, by creation time then id.
func (p *Plane) Snapshots() []SnapshotInfo {
	p.mu.Lock()
	out := make([]SnapshotInfo, 0, len(p.snaps))
	for _, si := range p.snaps {
		if !si.Removed {
			out = append(out, si)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b SnapshotInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// LookupSnapshot returns snapshot id's record, or an ENOENT *Error.
func (p *Plane) LookupSnapshot(id string) (SnapshotInfo, error) {
	p.mu.Lock()
	si, ok := p.snaps[id]
	p.mu.Unlock()
	if !ok || si.Removed {
		return SnapshotInfo{}, errNoSnapshot("lookup", id)
	}
	return si, nil
}

// Snapshots returns the listed snapshots taken of s, oldest first (not
// those of an earlier sandbox of its name that another user made).
func (s *Sandbox) Snapshots() []SnapshotInfo {
	var out []SnapshotInfo
	for _, si := range s.p.Snapshots() {
		if si.Sandbox == s.id && si.Owner.UID == s.owner.UID {
			out = append(out, si)
		}
	}
	return out
}

// reserveSnap reserves the name of a snapshot to take (id, or a
// generated one when "") and pins parent if it is still listed (else
// parent is "": the snapshot will be full). Release with unreserveSnap.
func (p *Plane) reserveSnap(verb, id, parent string) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", "", errClosed
	}
	if id == "" {
		for id == "" || p.snapTaken(id) {
			id = newID()
		}
	} else if p.snapTaken(id) {
		return "", "", Errorf(syscall.EEXIST, "%s: snapshot exists %s", verb, msg.Cite(id))
	}
	p.snapBusy[id] = true
	if _, ok := p.snaps[parent]; !ok {
		parent = ""
	} else {
		p.snapPins[parent]++
	}
	return id, parent, nil
}

// snapTime is a new snapshot's creation time: the wall clock's, or just
// after the newest snapshot's when the clock reads earlier (it stepped
// back).
func (p *Plane) snapTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now().Round(0)
	if !now.After(p.snapAt) {
		now = p.snapAt.Add(time.Microsecond)
	}
	p.snapAt = now
	return now
}

// snapTaken reports whether a snapshot name is in use. Plane.mu held.
func (p *Plane) snapTaken(id string) bool {
	_, listed := p.snaps[id]
	return listed || p.snapBusy[id]
}

// unreserveSnap ends a reservation; si, when its ID is set, is listed.
func (p *Plane) unreserveSnap(id, parent string, si SnapshotInfo) {
	p.mu.Lock()
	if si.ID != "" {
		p.snaps[si.ID] = si
	}
	delete(p.snapBusy, id)
	p.unpinLocked(parent)
	p.mu.Unlock()
}

// pinSnap returns snapshot id, pinned (rm refuses it) until unpinSnap.
func (p *Plane) pinSnap(verb, id string) (SnapshotRef, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	si, ok := p.snaps[id]
	if !ok || si.Removed {
		return SnapshotRef{}, errNoSnapshot(verb, id)
	}
	p.snapPins[id]++
	return SnapshotRef{SnapshotInfo: si, Dir: p.st.snapDir(id)}, nil
}

func (p *Plane) unpinSnap(id string) {
	p.mu.Lock()
	p.unpinLocked(id)
	p.mu.Unlock()
}

func (p *Plane) unpinLocked(id string) {
	if p.snapPins[id]--; p.snapPins[id] <= 0 {
		delete(p.snapPins, id)
	}
}

// mayUseSnap refuses (EPERM) a request on a snapshot from anyone but its
// owner or a privileged caller.
func mayUseSnap(ctx context.Context, verb string, si SnapshotInfo) error {
	c := cred.Of(ctx)
	if c.Privileged() || c.UID == si.Owner.UID {
		return nil
	}
	return Errorf(syscall.EPERM, "%s: snapshot %s belongs to uid %d", verb, msg.Cite(si.ID), si.Owner.UID)
}

// snapshot takes a snapshot of s (the snapshot verb): pause if running,
// the machine's snapshot into a temporary directory, resume, then the
// record and the rename that lists it.
func (s *Sandbox) snapshot(ctx context.Context, c Command, v *Verb) (string, error) {
	s.op.Lock()
	defer func() { s.op.Unlock(); s.p.notify(s.id) }()
	if !v.Allows(s.state) {
		return "", s.busy(v)
	}
	id, err := s.snapshotLocked(ctx, v.Name, c.Snap)
	if err != nil {
		return "", err
	}
	s.p.kickRetention()
	return id + "\n", nil
}

// snapshotLocked takes snapshot id ("": a generated name) of s, running
// or paused, and returns its name. op held.
func (s *Sandbox) snapshotLocked(ctx context.Context, verb, name string) (string, error) {
	p := s.p
	if s.onDisk() {
		return "", Errorf(syscall.EBUSY, "%s: sandbox %s is paused to disk; resume it first", verb, msg.Cite(s.id))
	}
	sm, ok := s.m.(Snapshotter)
	if !ok {
		return "", Errorf(syscall.ENOTSUP, "%s: the machine of sandbox %s cannot take snapshots", verb, msg.Cite(s.id))
	}
	id, parent, err := p.reserveSnap(verb, name, s.lastSnap)
	if err != nil {
		return "", err
	}
	var si SnapshotInfo
	defer func() { p.unreserveSnap(id, parent, si) }()
	dir, err := p.st.snapTemp(id)
	if err != nil {
		return "", Errorf(syscall.EIO, "%s: %v", verb, err)
	}
	// Where the time goes, logged with the snapshot (phases).
	var tm snapshot.Timing
	t := snapshot.Now()
	running := s.state == StateRunning
	if running {
		if err := s.m.Pause(ctx); err != nil {
			p.st.snapDrop(dir)
			return "", Errorf(Errno(err), "%s: pause: %s", verb, errText(err))
		}
		tm.Mark("pause", &t)
	}
	created := p.snapTime()
	st, err := sm.Snapshot(p.ctx, dir, parent)
	tm = append(tm, st.Took...)
	t = snapshot.Now()
	if err == nil {
		err = s.snapshotWorld(dir)
		tm.Mark("world", &t)
	}
	took := time.Since(created)
	if running {
		if rerr := s.m.Resume(p.ctx); rerr != nil {
			p.st.snapDrop(dir)
			perr := s.persist(verb, StatePaused, nil)
			s.setState(StatePaused, nil) // the machine stayed paused
			if perr != nil {
				p.log.Error("sandbox paused but its record is stale", "sandbox", s.id, "err", perr)
			}
			return "", Errorf(syscall.EIO, "%s: resume after the snapshot: %s (sandbox left paused)", verb, errText(rerr))
		}
		tm.Mark("resume", &t)
	}
	if err != nil {
		p.st.snapDrop(dir)
		return "", Errorf(Errno(err), "%s: %s", verb, errText(err))
	}
	if st.Base != "" {
		if err := p.st.snapBase(st.Base); err != nil {
			p.st.snapDrop(dir)
			return "", Errorf(syscall.EIO, "%s: keeping the template snapshot %s: %v", verb, msg.Cite(filepath.Base(st.Base)), err)
		}
	}
	c0 := s.cfg.Defaults()
	info := SnapshotInfo{ID: id, Sandbox: s.id, Parent: st.Parent, Owner: s.owner, Created: created, Full: st.Parent == "",
		MemBytes: c0.MemBytes, DataBytes: st.DataBytes, DiskBytes: st.DiskBytes, Template: c0.Template, CPUs: c0.CPUs, Boot: st.Boot}
	if err := p.st.snapCommit(dir, info); err != nil {
		p.st.snapDrop(dir)
		return "", Errorf(syscall.EIO, "%s: saving snapshot %s: %v", verb, msg.Cite(id), err)
	}
	tm.Mark("commit", &t)
	si = info
	s.lastSnap = id
	// Recorded, so that after a daemon restart its next snapshot is a
	// delta over this one (Spec.Last).
	if err := s.persist(verb, s.state, nil); err != nil {
		p.log.Warn("snapshot taken but the sandbox's record still names the one before", "sandbox", s.id, "err", err)
	}
	tm.Mark("record", &t)
	p.log.Info("snapshot taken", "sandbox", s.id, "snapshot", id, "parent", st.Parent, "data", st.DataBytes, "disk", st.DiskBytes,
		"machine", took.Round(time.Millisecond), "after", time.Since(created).Round(time.Millisecond), "phases", tm.String())
	return id, nil
}

// rollback replaces s's machine by a restore of one of its snapshots.
func (s *Sandbox) rollback(ctx context.Context, c Command, v *Verb) error {
	p := s.p
	s.op.Lock()
	defer func() { s.op.Unlock(); p.notify(s.id) }()
	if !v.Allows(s.state) {
		return s.busy(v)
	}
	rs, ok := p.rt.(SnapshotRestorer)
	if !ok {
		return Errorf(syscall.ENOTSUP, "%s: the runtime cannot restore snapshots", v.Name)
	}
	ref, err := p.pinSnap(v.Name, c.Snap)
	if err != nil {
		return err
	}
	defer p.unpinSnap(ref.ID)
	if ref.Sandbox != s.id {
		return Errorf(syscall.EINVAL, "%s: snapshot %s is of sandbox %s, not %s", v.Name, msg.Cite(ref.ID), msg.Cite(ref.Sandbox), msg.Cite(s.id))
	}
	// A snapshot outlives its sandbox and names are reused: the one of
	// an earlier sandbox of that name may be another user's.
	if ref.Owner.UID != s.owner.UID {
		return Errorf(syscall.EPERM, "%s: snapshot %s belongs to uid %d", v.Name, msg.Cite(ref.ID), ref.Owner.UID)
	}
	old := s.m // nil: paused to disk, its image goes with the work directory
	s.mu.Lock()
	if s.link != nil { // it reaches the old guest
		s.link.Close()
		s.link = nil
	}
	s.mu.Unlock()
	s.waitEnding() // paused to disk: its machine's end
	if old != nil {
		if err := old.Stop(ctx); err != nil {
			return Errorf(syscall.EIO, "%s: stopping %s: %s", v.Name, msg.Cite(s.id), errText(err))
		}
		<-old.Done() // its watcher sees s.m replaced and leaves
	}
	if err := s.rollbackWorld(ref); err != nil {
		s.die("rollback: "+errText(err), err)
		return msg.Prefix(v.Name, err)
	}
	spec := Spec{ID: s.id, Config: s.cfg, Dir: p.st.runDir(s.id), UID: s.uid}
	m, err := rs.Restore(p.ctx, spec, ref)
	if err == nil && m == nil {
		err = Errorf(syscall.EIO, "runtime returned no machine")
	}
	if err != nil {
		why := "rollback: " + errText(err)
		s.die(why, err)
		return Errorf(Errno(err), "%s: sandbox %s failed to restore %s: %s", v.Name, msg.Cite(s.id), msg.Cite(ref.ID), errText(err))
	}
	s.mu.Lock()
	s.disk = ""
	s.mu.Unlock()
	s.attach(m)
	s.lastSnap = ref.ID
	err = s.persist(v.Name, StateRunning, nil)
	if s.state == StatePaused {
		s.setState(StateRunning, nil)
	} else {
		s.touch()
	}
	if werr := s.attachWorld(ctx, m); werr != nil && err == nil {
		err = Errorf(Errno(werr), "%s: sandbox %s runs, without its /workspace: %s", v.Name, msg.Cite(s.id), errText(werr))
	}
	return err
}

// touch tells waiters that s changed without a state change (a rollback
// replaced its machine). op held.
func (s *Sandbox) touch() {
	s.mu.Lock()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// SnapshotCtl executes one message written to snapshots/<id>/ctl
// (SnapshotVerbs). A failure's text becomes the plane's Err (/err) and is
// logged.
func (p *Plane) SnapshotCtl(ctx context.Context, id string, m []byte) error {
	err := p.snapshotCtl(ctx, id, m)
	if err != nil {
		p.fail("", m, err)
	}
	return err
}

func (p *Plane) snapshotCtl(ctx context.Context, id string, m []byte) error {
	c, v, err := parse(m, SnapshotVerbs)
	if err != nil {
		return err
	}
	if p.isClosed() {
		return errClosed
	}
	c.Snap = id
	return v.Run.snap(p, ctx, c, v)
}

// dropSnap removes snapshot id (a failed clone's) whoever asks.
func (p *Plane) dropSnap(id string) error {
	p.mu.Lock()
	si, ok := p.snaps[id]
	p.mu.Unlock()
	if !ok || si.Removed {
		return nil
	}
	return p.rmSnap(cred.With(context.Background(), cred.Cred{}), Command{Snap: si.ID}, SnapshotVerbs.Lookup("rm"))
}

// snapGone reports whether snapshot id's directory is gone from the
// store (a removal that failed after its rename).
func (p *Plane) snapGone(id string) bool {
	_, err := os.Lstat(p.st.snapDir(id))
	return errors.Is(err, os.ErrNotExist)
}

// restoreNew starts the machine of a sandbox made by new from=: a restore
// of the snapshot, pinned while it is read.
func (p *Plane) restoreNew(ctx context.Context, spec Spec) (Machine, error) {
	rs, ok := p.rt.(SnapshotRestorer)
	if !ok {
		return nil, Errorf(syscall.ENOTSUP, "the runtime cannot restore snapshots")
	}
	ref, err := p.pinSnap("new", spec.From)
	if err != nil {
		return nil, err
	}
	defer p.unpinSnap(ref.ID)
	return rs.Restore(ctx, spec, ref)
}
