package ctl

// A sandbox's world in its snapshots (docs/worlds.md "Snapshots and
// clones"): the snapshot code calls these hooks. A snapshot keeps a copy
// of the world's changes beside the memory; rollback brings them back; a
// sandbox made from the snapshot (clone, new from=) gets a world of its
// own with a copy of them. After any of these, and after a daemon
// restart, the guest's /workspace is mounted again (attachWorld).

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sandfs/ctl/msg"
)

// The world's part of a snapshot directory:
//
//	<snapshot>/world/info.json   the world's record when the snapshot was taken
//	<snapshot>/world/data/       its changes (WorldBackend.Save)
const (
	worldSnapName = "world"
	worldSnapData = "data"
)

// snapshotWorld saves s's world (if any, and if it has changes of its
// own: not unsafe-rw) into the snapshot being written in dir. The
// machine is paused; op held.
func (s *Sandbox) snapshotWorld(dir string) error {
	name := s.cfg.World
	if name == "" {
		return nil
	}
	wi, err := s.p.LookupWorld(name)
	if err != nil {
		return err
	}
	if wi.Mode == "unsafe-rw" {
		return nil // its changes are in the lower already
	}
	b, err := s.p.World(name)
	if Errno(err) == syscall.ENODEV {
		return nil
	}
	if err != nil {
		return err
	}
	wd := filepath.Join(dir, worldSnapName)
	if err := os.Mkdir(wd, 0o700); err != nil {
		return Errorf(syscall.EIO, "world: %v", err)
	}
	j, err := json.Marshal(wi)
	if err == nil {
		err = writeFileSync(filepath.Join(wd, snapInfo), append(j, '\n'))
	}
	if err != nil {
		return Errorf(syscall.EIO, "world: %v", err)
	}
	how, err := b.Save(filepath.Join(wd, worldSnapData))
	if err != nil {
		return Errorf(Errno(err), "world %s: %v", msg.Cite(name), err)
	}
	s.p.log.Info("world saved with the snapshot", "sandbox", s.id, "world", name, "copy", how)
	return nil
}

// savedWorld reads the world record a snapshot in dir keeps; ok is
// false if it keeps none.
func savedWorld(dir string) (wi WorldInfo, ok bool, err error) {
	j, err := os.ReadFile(filepath.Join(dir, worldSnapName, snapInfo))
	if errors.Is(err, os.ErrNotExist) {
		return wi, false, nil
	}
	if err == nil {
		err = json.Unmarshal(j, &wi)
	}
	if err == nil {
		err = wi.validate(wi.Name)
	}
	if err != nil {
		return wi, false, Errorf(syscall.EIO, "world of the snapshot: %v", err)
	}
	return wi, true, nil
}

// rollbackWorld brings s's world back to what snapshot ref kept of it.
// The old machine has ended; op held.
func (s *Sandbox) rollbackWorld(ref SnapshotRef) error {
	_, ok, err := savedWorld(ref.Dir)
	if err != nil || !ok || s.cfg.World == "" {
		return err
	}
	b, err := s.p.World(s.cfg.World)
	if Errno(err) == syscall.ENODEV {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.Restore(filepath.Join(ref.Dir, worldSnapName, worldSnapData)); err != nil {
		return Errorf(Errno(err), "world %s: %v", msg.Cite(s.cfg.World), err)
	}
	return nil
}

// forkWorld gives a sandbox made from a snapshot that keeps a world
// (clone, new from=) a world of its own: a new world over the same
// lower, in the same mode, owned by the sandbox's owner, holding a copy
// of the changes the snapshot kept; the sandbox's config names it. A
// world= given with from= that names another world is kept instead.
// In launch, before the record is written; op held.
func (s *Sandbox) forkWorld(verb string) error {
	p := s.p
	if s.cfg.From == "" {
		return nil
	}
	ref, err := p.pinSnap(verb, s.cfg.From)
	if err != nil {
		return err
	}
	defer p.unpinSnap(ref.ID)
	wi, ok, err := savedWorld(ref.Dir)
	if err != nil || !ok || (s.cfg.World != "" && s.cfg.World != wi.Name) {
		return msg.Prefix(verb, err)
	}
	if s.owner.UID != 0 && s.owner.UID != wi.Owner.UID {
		return Errorf(syscall.EPERM, "%s: the world of snapshot %s belongs to uid %d", verb, msg.Cite(ref.ID), wi.Owner.UID)
	}
	nw := WorldInfo{Owner: s.owner, Lower: wi.Lower, Mode: wi.Mode, Created: time.Now().UTC()}
	var b WorldBackend
	for n := 1; ; n++ { // a name taken (by a world its owner made, or an earlier fork): the next
		nw.Name = forkName(wi.Name, s.id, n)
		b, err = p.addWorld(verb, nw)
		if Errno(err) != syscall.EEXIST || n == maxForkNames {
			break
		}
	}
	if err != nil {
		return err
	}
	if b != nil {
		if err := b.Restore(filepath.Join(ref.Dir, worldSnapName, worldSnapData)); err != nil {
			if rerr := p.removeWorld(verb, nw.Name); rerr != nil {
				p.log.Error("cannot remove the world of a failed fork", "world", nw.Name, "err", rerr)
			}
			return Errorf(Errno(err), "%s: world %s: %v", verb, msg.Cite(nw.Name), err)
		}
	}
	s.mu.Lock()
	s.cfg.World, s.forked = nw.Name, nw.Name
	s.mu.Unlock()
	return nil
}

// dropFork removes the world forkWorld made for cb (a clone that
// failed: nothing of it stays).
func (p *Plane) dropFork(cb *Sandbox) error {
	cb.mu.Lock()
	name, forked := cb.cfg.World, cb.forked
	cb.mu.Unlock()
	if forked == "" || name != forked {
		return nil
	}
	return p.removeWorld("clone", name)
}

// maxForkNames bounds the names forkWorld tries.
const maxForkNames = 100

// forkName is the n-th name (from 1) of the world forked for sandbox id
// from world w: "<w>-<id>", then "<w>-<id>-<n>", w shortened to fit a
// name (at most 63 bytes); where no room is left for any of w, the id
// (shortened for the suffix) alone.
func forkName(w, id string, n int) string {
	tail := id
	if n > 1 {
		tail += "-" + strconv.Itoa(n)
	}
	if room := 63 - 1 - len(tail); room >= 1 {
		return w[:min(len(w), room)] + "-" + tail
	}
	if n == 1 {
		return id
	}
	suffix := "-" + strconv.Itoa(n)
	return id[:63-len(suffix)] + suffix
}

// worldLost marks s, re-attached at a daemon start, as having a guest
// whose /workspace is on a connection that ended with the old daemon:
// it is mounted again when the daemon serves worlds (SetWorldOpener)
// and the sandbox runs, or at its next resume. op held.
func (s *Sandbox) worldLost() {
	if s.cfg.World == "" {
		return
	}
	s.p.wr.mu.Lock()
	if s.p.wr.lost == nil {
		s.p.wr.lost = map[*Sandbox]bool{}
	}
	s.p.wr.lost[s] = true
	s.p.wr.mu.Unlock()
}

// reattachLost mounts the worlds of the running sandboxes worldLost
// marked, each in a goroutine of its own.
func (p *Plane) reattachLost() {
	p.wr.mu.Lock()
	var todo []*Sandbox
	for s := range p.wr.lost {
		todo = append(todo, s)
	}
	p.wr.mu.Unlock()
	for _, s := range todo {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s.op.Lock()
			defer s.op.Unlock()
			if s.state == StateRunning {
				s.resumedWorld(p.ctx)
			}
		}()
	}
}

// resumedWorld mounts s's world again if worldLost marked it: s runs
// (again). op held.
func (s *Sandbox) resumedWorld(ctx context.Context) {
	p := s.p
	p.wr.mu.Lock()
	lost, ready := p.wr.lost[s], p.wr.open != nil
	if lost && ready {
		delete(p.wr.lost, s)
	}
	p.wr.mu.Unlock()
	if !lost || !ready || s.m == nil {
		return
	}
	if err := s.attachWorld(ctx, s.m); err != nil {
		p.log.Warn("sandbox's world not attached again", "sandbox", s.id, "err", err)
	}
}
