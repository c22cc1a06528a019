package ctl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// diskRuntime is reattachRuntime that can also resume machines paused
// to disk (DiskResumer); its machines' images are "img <marker>".
type diskRuntime struct {
	reattachRuntime
	mu      sync.Mutex
	resumes []string // every ResumeFromDisk's image, in order
	fail    error    // the next ResumeFromDisk fails with this
}

func newDiskRuntime() *diskRuntime {
	return &diskRuntime{reattachRuntime: reattachRuntime{newFakeRuntime()}}
}

func (r *diskRuntime) ResumeFromDisk(ctx context.Context, s Spec, img string) (Machine, error) {
	r.mu.Lock()
	r.resumes = append(r.resumes, img)
	fail := r.fail
	r.fail = nil
	r.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	marker, ok := strings.CutPrefix(img, "img ")
	if !ok {
		return nil, &ImageIntactError{Errorf(syscall.EINVAL, "bad image %q", img)}
	}
	m := &fakeMachine{done: make(chan struct{}), marker: marker}
	r.mu.Lock()
	r.live[s.ID] = m
	r.mu.Unlock()
	return m, nil
}

// SaveToDisk implements DiskPauser: the image names the marker.
func (m *fakeMachine) SaveToDisk(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.paused {
		return "", errors.New("save to disk: not paused")
	}
	if m.snapFail != nil {
		return "", m.snapFail
	}
	return "img " + m.marker, nil
}

// Discard implements DiskPauser: the machine ends as a killed VMM does.
func (m *fakeMachine) Discard() { m.crash(errors.New("vmm killed by signal killed")) }

var (
	_ DiskPauser  = (*fakeMachine)(nil)
	_ DiskResumer = (*diskRuntime)(nil)
)

// TestPauseToDisk: pause ends the machine once its image is recorded (the
// sandbox stays paused, with no pid: its watcher does not report the
// kill as a death); resume starts a machine from that image; kill of a
// sandbox paused to disk needs no machine; a snapshot of one is refused.
func TestPauseToDisk(t *testing.T) {
	dir := t.TempDir()
	rt := newDiskRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	s := lookup(t, p, "a")
	m := rt.machine("a")
	m.marker = "before"
	sdo(t, s, "pause")
	if !m.ended() {
		t.Fatalf("machine still running after pause to disk")
	}
	if st := s.Status(); !strings.HasPrefix(st, "a paused ") || !strings.Contains(st, " pid=0 ") {
		t.Errorf("status after pause = %q; want paused, pid=0", st)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sandboxes", "a.json"))
	if err != nil || !strings.Contains(string(b), `"disk_pause":"img before"`) {
		t.Errorf("record after pause = %s, %v; want disk_pause", b, err)
	}
	if err := s.Ctl(ctx(t), []byte("snapshot s1")); Errno(err) != syscall.EBUSY || !strings.Contains(s.Err(), "paused to disk") {
		t.Errorf("snapshot while paused to disk = %v (%q); want EBUSY", err, s.Err())
	}
	sdo(t, s, "resume")
	m2 := rt.machine("a")
	if m2 == m || m2.marker != "before" || s.State() != StateRunning {
		t.Fatalf("after resume: state %s, machine marker %q; want running from the image", s.State(), m2.marker)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sandboxes", "a.json")); strings.Contains(string(b), "disk_pause") {
		t.Errorf("record after resume = %s; want no disk_pause", b)
	}
	sdo(t, s, "pause")
	sdo(t, s, "kill")
	if s.State() != StateDead {
		t.Errorf("kill while paused to disk: state %s; want dead", s.State())
	}
}

// TestPauseToDiskRestart: a sandbox paused to disk comes back paused
// after a daemon restart (nothing to re-attach; a machine left running
// in its directory is reaped) and resumes from its image.
func TestPauseToDiskRestart(t *testing.T) {
	dir := t.TempDir()
	rt := newDiskRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	rt.machine("a").marker = "kept"
	sdo(t, lookup(t, p, "a"), "pause")
	p.Close()
	left := rt.run("a") // as if the daemon died before it killed the VMM

	p2, _ := openPlane(t, dir, rt)
	s := lookup(t, p2, "a")
	if st := s.State(); st != StatePaused {
		t.Fatalf("after restart: %s; want paused", st)
	}
	if !left.ended() {
		t.Errorf("the machine left in a's directory was not reaped")
	}
	sdo(t, s, "resume")
	if m := rt.machine("a"); m.marker != "kept" || s.State() != StateRunning {
		t.Errorf("resume after restart: %s, marker %q; want running, kept", s.State(), m.marker)
	}
}

// TestResumeFromDiskFails: a failure before anything ran leaves the
// sandbox paused to disk; any other kills it, err saying why.
func TestResumeFromDiskFails(t *testing.T) {
	rt := newDiskRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new a")
	s := lookup(t, p, "a")
	sdo(t, s, "pause")
	rt.fail = &ImageIntactError{Errorf(syscall.ESTALE, "template changed")}
	if err := s.Ctl(ctx(t), []byte("resume")); Errno(err) != syscall.ESTALE || s.State() != StatePaused {
		t.Errorf("resume, intact failure = %v, state %s; want ESTALE, paused", err, s.State())
	}
	rt.fail = Errorf(syscall.EIO, "guest did not answer")
	if err := s.Ctl(ctx(t), []byte("resume")); Errno(err) != syscall.EIO || s.State() != StateDead || !strings.Contains(s.Err(), "guest did not answer") {
		t.Errorf("resume, failure = %v, state %s, err %q; want EIO, dead, why", err, s.State(), s.Err())
	}
}

// TestPauseToDiskFails: a machine that cannot save its image keeps
// running (pause fails, state unchanged).
func TestPauseToDiskFails(t *testing.T) {
	rt := newDiskRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new a")
	s := lookup(t, p, "a")
	m := rt.machine("a")
	m.snapFail = Errorf(syscall.ENOSPC, "disk full")
	if err := s.Ctl(ctx(t), []byte("pause")); Errno(err) != syscall.ENOSPC || s.State() != StateRunning || m.isPaused() || m.ended() {
		t.Errorf("pause, save fails = %v, state %s, paused %v, ended %v; want ENOSPC, running", err, s.State(), m.isPaused(), m.ended())
	}
}

// TestRestartKeepsLastSnapshot: after a daemon restart, a re-attached
// sandbox's next snapshot is a delta over its last one (the record
// names it), not a full one.
func TestRestartKeepsLastSnapshot(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new a")
	sdo(t, lookup(t, p, "a"), "snapshot s1")
	p.Close()

	p2, _ := openPlane(t, dir, rt)
	sdo(t, lookup(t, p2, "a"), "snapshot s2")
	if si, err := p2.LookupSnapshot("s2"); err != nil || si.Parent != "s1" {
		t.Errorf("s2 after restart = %+v, %v; want a delta over s1", si, err)
	}
}

// TestPauseToDiskWorld: a sandbox with a world pauses to disk as any
// other (no machine while paused), its world untouched, and resumes.
func TestPauseToDiskWorld(t *testing.T) {
	dir := t.TempDir()
	rt := newDiskRuntime()
	p, _ := openPlane(t, dir, rt)
	opened := map[string]*fakeWorld{}
	p.SetWorldOpener(worldsOpener(opened))
	lower := readableLower(t)
	if _, err := p.Ctl(as(t, alice), []byte("world wa lower="+lower)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ctl(as(t, alice), []byte("new box world=wa")); err != nil {
		t.Fatal(err)
	}
	s := lookup(t, p, "box")
	m := rt.machine("box")
	opened["wa"].state = "w1"
	sdo(t, s, "pause")
	if st := s.Status(); !m.ended() || !strings.HasPrefix(st, "box paused ") || !strings.Contains(st, " pid=0 ") {
		t.Fatalf("after pause: status %q, machine ended %v; want paused to disk", st, m.ended())
	}
	sdo(t, s, "resume")
	if s.State() != StateRunning || rt.machine("box") == m || opened["wa"].state != "w1" {
		t.Errorf("after resume: %s, world %q; want running in a new machine, world w1", s.State(), opened["wa"].state)
	}
}
