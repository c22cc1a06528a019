package ctl

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl/cred"
)

// snapNames are the ids of p's snapshots, in listing order.
func snapNames(p *Plane) []string {
	var out []string
	for _, si := range p.Snapshots() {
		out = append(out, si.ID)
	}
	return out
}

// storeEntries are the names in p's snapshot store.
func storeEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, snapsName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSnapshotVerb takes snapshots of a running and a paused sandbox:
// paused while taken, state kept, first full, then deltas over the last,
// listed with their info; bad input changes nothing.
func TestSnapshotVerb(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	s := lookup(t, p, "box")
	m := rt.machine("box")
	m.marker = "one"
	sdo(t, s, "snapshot s1")
	if s.State() != StateRunning || m.isPaused() || len(m.snapped) != 1 || !m.snapped[0] {
		t.Fatalf("after snapshot: state %s, paused %v, snapshots taken paused %v; want running, false, [true]", s.State(), m.isPaused(), m.snapped)
	}
	si, err := p.LookupSnapshot("s1")
	if err != nil || !si.Full || si.Parent != "" || si.Sandbox != "box" || si.Template != "base" || si.CPUs != 1 {
		t.Fatalf("LookupSnapshot(s1) = %+v, %v", si, err)
	}
	want := "s1 sandbox=box parent=- created="
	if l := si.Line(); !strings.HasPrefix(l, want) || !strings.HasSuffix(l, " mem=268435456 data=4096 disk=8192 kind=full") {
		t.Errorf("Line() = %q; want %q... kind=full", l, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, snapsName, "s1", "marker")); err != nil || string(b) != "one" {
		t.Errorf("s1's files: %q, %v", b, err)
	}

	sdo(t, s, "pause")
	sdo(t, s, "snapshot")
	if s.State() != StatePaused || !m.isPaused() {
		t.Errorf("snapshot of a paused sandbox: state %s, paused %v; want it left paused", s.State(), m.isPaused())
	}
	names := snapNames(p)
	if len(names) != 2 || names[0] != "s1" || !ValidName(names[1]) {
		t.Fatalf("snapshots %q; want s1 and a generated id", names)
	}
	if si, _ := p.LookupSnapshot(names[1]); si.Full || si.Parent != "s1" || !strings.HasSuffix(si.Line(), "kind=delta") {
		t.Errorf("second snapshot %+v; want a delta over s1", si)
	}
	if got := s.Snapshots(); len(got) != 2 {
		t.Errorf("Sandbox.Snapshots() = %v; want 2", got)
	}

	before := storeEntries(t, dir)
	for _, tc := range []struct {
		m     string
		errno syscall.Errno
		text  string
	}{
		{"snapshot s1", syscall.EEXIST, `snapshot: snapshot exists "s1"`},
		{"snapshot Bad", syscall.EINVAL, `snapshot: invalid snapshot name "Bad"`},
		{"snapshot a b", syscall.EINVAL, "too many arguments"},
	} {
		err := s.Ctl(ctx(t), []byte(tc.m))
		wantErr(t, tc.m, err, tc.errno, tc.text)
		if s.Err() != err.Error() {
			t.Errorf("%s: err file %q; want %q", tc.m, s.Err(), err.Error())
		}
	}
	m.snapFail = errors.New("disk full")
	wantErr(t, "snapshot s3 (machine fails)", s.Ctl(ctx(t), []byte("snapshot s3")), syscall.EIO, "snapshot: disk full")
	m.snapFail = nil
	sdo(t, s, "kill")
	wantErr(t, "snapshot of a dead sandbox", s.Ctl(ctx(t), []byte("snapshot s4")), syscall.EBUSY, "need running or paused")
	if after := storeEntries(t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("store after refused snapshots %q; want %q", after, before)
	}
	if len(snapNames(p)) != 2 {
		t.Errorf("snapshots %q after refusals; want 2", snapNames(p))
	}
}

// TestSnapshotsOutliveRestart: snapshots outlive their sandbox and the
// daemon; a write the daemon did not finish (.tmp-) is removed at Open.
func TestSnapshotsOutliveRestart(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	sdo(t, lookup(t, p, "box"), "snapshot s1")
	do(t, p, "kill box")
	do(t, p, "rm box")
	if names := snapNames(p); len(names) != 1 || names[0] != "s1" {
		t.Fatalf("snapshots after rm of the sandbox %q; want [s1]", names)
	}
	p.Close()
	// A daemon killed half-way through a snapshot and through a rm.
	for _, d := range []string{".tmp-s2-123/s2", ".rm-s1x-9/s1x"} {
		if err := os.MkdirAll(filepath.Join(dir, snapsName, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p2, _ := openPlane(t, dir, rt)
	if names := snapNames(p2); len(names) != 1 || names[0] != "s1" {
		t.Errorf("snapshots after restart %q; want [s1]", names)
	}
	if e := storeEntries(t, dir); len(e) != 1 || e[0] != "s1" {
		t.Errorf("store after restart %q; want [s1]", e)
	}
}

// TestSnapshotRm: a parent is refused while a delta is over it; another
// uid may not remove it; the owner may; the next snapshot of the sandbox
// is then full.
func TestSnapshotRm(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	if _, err := p.Ctl(as(t, alice), []byte("new box")); err != nil {
		t.Fatal(err)
	}
	s := lookup(t, p, "box")
	sdo(t, s, "snapshot s1")
	sdo(t, s, "snapshot s2")
	wantErr(t, "rm s2 by bob", p.SnapshotCtl(as(t, bob), "s2", []byte("rm")), syscall.EPERM, `belongs to uid 4001`)
	if p.Err() == "" {
		t.Errorf("a failed snapshot rm left /err empty")
	}
	wantErr(t, "rm nosuch", p.SnapshotCtl(as(t, alice), "nosuch", []byte("rm")), syscall.ENOENT, `rm: no snapshot "nosuch"`)
	wantErr(t, "bogus", p.SnapshotCtl(as(t, alice), "s2", []byte("bogus")), syscall.EINVAL, `unknown verb "bogus"`)
	// s1 has a delta over it: unlisted, its files kept for s2.
	if err := p.SnapshotCtl(as(t, alice), "s1", []byte("rm")); err != nil {
		t.Fatalf("rm s1 (parent of s2) = %v", err)
	}
	if n, e := snapNames(p), storeEntries(t, dir); !slices.Equal(n, []string{"s2"}) || !slices.Equal(e, []string{"s1", "s2"}) {
		t.Errorf("after rm s1: listed %q, store %q; want [s2], [s1 s2]", n, e)
	}
	wantErr(t, "rm s1 again", p.SnapshotCtl(as(t, alice), "s1", []byte("rm")), syscall.ENOENT, `rm: no snapshot "s1"`)
	wantErr(t, "snapshot s1 (removed, kept)", s.Ctl(ctx(t), []byte("snapshot s1")), syscall.EEXIST, `snapshot exists "s1"`)
	do(t, p, "new b2 from=s2") // its chain still resolves
	// The last delta over s1 removed: s1 goes too.
	if err := p.SnapshotCtl(as(t, alice), "s2", []byte("rm")); err != nil {
		t.Fatalf("rm s2 = %v", err)
	}
	if n, e := snapNames(p), storeEntries(t, dir); len(n) != 0 || len(e) != 0 {
		t.Fatalf("after rm: listed %q, store %q; want nothing", n, e)
	}
	sdo(t, s, "snapshot s3")
	if si, _ := p.LookupSnapshot("s3"); !si.Full {
		t.Errorf("snapshot after its parent was removed: %+v; want full", si)
	}
}

// TestSnapshotRmCollectedAtOpen: a removed snapshot whose last delta
// went while the daemon died before collecting it is removed at Open.
func TestSnapshotRmCollectedAtOpen(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	s := lookup(t, p, "box")
	sdo(t, s, "snapshot s1")
	sdo(t, s, "snapshot s2")
	if err := p.SnapshotCtl(ctx(t), "s1", []byte("rm")); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if err := os.RemoveAll(filepath.Join(dir, "snapshots", "s2")); err != nil { // s2's removal, s1's not yet
		t.Fatal(err)
	}
	p2, _ := openPlane(t, dir, rt)
	if n, e := snapNames(p2), storeEntries(t, dir); len(n) != 0 || len(e) != 0 {
		t.Errorf("after Open: listed %q, store %q; want nothing", n, e)
	}
}

// TestRollback replaces the machine by a restore of the sandbox's own
// snapshot: same sandbox, running, the old machine stopped, the next
// snapshot a delta over it. Bad input changes nothing.
func TestRollback(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	do(t, p, "new other")
	s := lookup(t, p, "box")
	old := rt.machine("box")
	old.marker = "before"
	sdo(t, s, "snapshot s1")
	rt.machine("other").marker = "other's"
	sdo(t, lookup(t, p, "other"), "snapshot o1")
	sdo(t, s, "snapshot s2")

	ver := s.Version()
	for _, tc := range []struct {
		m     string
		errno syscall.Errno
		text  string
	}{
		{"rollback nosuch", syscall.ENOENT, `rollback: no snapshot "nosuch"`},
		{"rollback o1", syscall.EINVAL, `rollback: snapshot "o1" is of sandbox "other", not "box"`},
		{"rollback", syscall.EINVAL, "missing argument"},
		{"rollback B!", syscall.EINVAL, "invalid snapshot name"},
	} {
		wantErr(t, tc.m, s.Ctl(ctx(t), []byte(tc.m)), tc.errno, tc.text)
	}
	if s.Version() != ver || old.ended() || rt.machine("box") != old {
		t.Fatalf("refused rollbacks changed the sandbox")
	}

	sdo(t, s, "pause")
	sdo(t, s, "rollback s1")
	m := rt.machine("box")
	if !old.ended() || m == old || m.marker != "before" || s.State() != StateRunning {
		t.Fatalf("after rollback: old ended %v, new machine %v with %q, state %s; want a restore of s1, running", old.ended(), m != old, m.marker, s.State())
	}
	if got := rt.froms[len(rt.froms)-1]; got.ID != "s1" || got.Dir != filepath.Join(dir, snapsName, "s1") || rt.lastSpec().ID != "box" {
		t.Errorf("Restore(%+v) for %q; want s1 for box", got, rt.lastSpec().ID)
	}
	sdo(t, s, "snapshot s3")
	if si, _ := p.LookupSnapshot("s3"); si.Parent != "s1" {
		t.Errorf("snapshot after rollback: %+v; want a delta over s1", si)
	}
	// The old machine's end is not the sandbox's death.
	if st := s.State(); st != StateRunning {
		t.Errorf("state %s after the old machine ended; want running", st)
	}

	rt.mu.Lock()
	rt.fail = errors.New("restore broke")
	rt.mu.Unlock()
	wantErr(t, "rollback that fails", s.Ctl(ctx(t), []byte("rollback s2")), syscall.EIO, "restore broke")
	if s.State() != StateDead || !strings.Contains(s.Err(), "restore broke") {
		t.Errorf("after a failed restore: %s, err %q; want dead with the reason", s.State(), s.Err())
	}
}

// TestNewFrom creates sandboxes from a snapshot, also after its sandbox
// is gone; the snapshot gives the shape; others' snapshots are refused.
func TestNewFrom(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	if _, err := p.Ctl(as(t, alice), []byte("new box mem=512M cpus=2")); err != nil {
		t.Fatal(err)
	}
	rt.machine("box").marker = "box's"
	sdo(t, lookup(t, p, "box"), "snapshot s1")
	do(t, p, "kill box")

	for _, tc := range []struct {
		c     cred.Cred
		m     string
		errno syscall.Errno
		text  string
	}{
		{alice, "new c1 from=nosuch", syscall.ENOENT, `new: no snapshot "nosuch"`},
		{alice, "new c1 from=s1 mem=1G", syscall.EINVAL, `from= gives template, mem and cpus "from=s1"`},
		{alice, "new c1 from=Bad", syscall.EINVAL, `invalid snapshot name "from=Bad"`},
		{bob, "new c1 from=s1", syscall.EPERM, `new: snapshot "s1" belongs to uid 4001`},
	} {
		_, err := p.Ctl(as(t, tc.c), []byte(tc.m))
		wantErr(t, tc.m, err, tc.errno, tc.text)
		if p.Err() != err.Error() {
			t.Errorf("%s: /err %q; want %q", tc.m, p.Err(), err.Error())
		}
	}
	if _, err := p.Lookup("c1"); err == nil {
		t.Fatalf("a refused new from= left sandbox c1")
	}
	if reply, err := p.Ctl(as(t, alice), []byte("new c1 from=s1 timeout=1h")); err != nil || reply != "c1\n" {
		t.Fatalf("new c1 from=s1 = %q, %v", reply, err)
	}
	c1 := lookup(t, p, "c1")
	spec := rt.lastSpec()
	if spec.From != "s1" || spec.MemBytes != 512<<20 || spec.CPUs != 2 || spec.Timeout == 0 || rt.machine("c1").marker != "box's" {
		t.Errorf("c1's spec %+v, marker %q; want from s1, 512M, 2 cpus, a timeout", spec, rt.machine("c1").marker)
	}
	if c1.Owner() != alice.Owner() || !strings.Contains(c1.Status(), "mem=512M cpus=2") {
		t.Errorf("c1: owner %v, status %q", c1.Owner(), c1.Status())
	}
	sdo(t, c1, "snapshot c1s")
	if si, _ := p.LookupSnapshot("c1s"); si.Parent != "s1" || si.Sandbox != "c1" {
		t.Errorf("snapshot of c1: %+v; want a delta over s1", si)
	}
}

// TestCloneVerb: a snapshot, then n sandboxes from it, their ids replied;
// bad counts change nothing; a clone that fails leaves nothing behind.
func TestCloneVerb(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, logs := openPlane(t, dir, rt)
	if _, err := p.Ctl(as(t, alice), []byte("new box cpus=2")); err != nil {
		t.Fatal(err)
	}
	s := lookup(t, p, "box")
	rt.machine("box").marker = "state of box"
	for _, m := range []string{"clone 0", "clone 65", "clone x", "clone +2", "clone 2 concurrency=0", "clone 2 concurrency=17", "clone 2 bogus=1", "clone 1 2"} {
		wantErr(t, m, s.Ctl(ctx(t), []byte(m)), syscall.EINVAL)
	}
	if n, boxes := snapNames(p), ids(p); len(n) != 0 || len(boxes) != 1 {
		t.Fatalf("after refused clones: snapshots %q, sandboxes %q", n, boxes)
	}

	reply, err := s.CtlReply(ctx(t), []byte("clone 3 concurrency=2"))
	if err != nil {
		t.Fatalf("clone 3 = %v", err)
	}
	clones := strings.Fields(reply)
	snaps := snapNames(p)
	if len(clones) != 3 || !strings.HasSuffix(reply, "\n") || len(snaps) != 1 {
		t.Fatalf("clone 3 replied %q, snapshots %q; want 3 ids and one snapshot", reply, snaps)
	}
	for _, id := range clones {
		c := lookup(t, p, id)
		if c.State() != StateRunning || c.Owner() != alice.Owner() || c.Config().CPUs != 2 || rt.machine(id).marker != "state of box" {
			t.Errorf("clone %s: %s, owner %v, cpus %d, marker %q", id, c.State(), c.Owner(), c.Config().CPUs, rt.machine(id).marker)
		}
	}

	// The second restore of the next clone fails: nothing stays.
	before := ids(p)
	rt.mu.Lock()
	rt.failRestore = len(rt.froms) + 2
	rt.mu.Unlock()
	err = s.Ctl(ctx(t), []byte("clone 4 concurrency=1"))
	wantErr(t, "clone 4 (second fails)", err, syscall.EIO, "clone 2 of 4", "fails", "removed")
	if after := ids(p); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("sandboxes after a failed clone %q; want %q", after, before)
	}
	if n := snapNames(p); len(n) != 1 || n[0] != snaps[0] {
		t.Errorf("snapshots after a failed clone %q; want %q", n, snaps)
	}
	if e := storeEntries(t, dir); len(e) != 1 {
		t.Errorf("store after a failed clone %q; want one snapshot", e)
	}
	// Two uids left: the third clone's start finds none, which removes
	// it; the clean-up removes the other two and leaves that one be
	// rather than log its removal as failed.
	rt.mu.Lock()
	rt.ids = IDRange{First: 5000, Count: 2}
	rt.mu.Unlock()
	err = s.Ctl(ctx(t), []byte("clone 3 concurrency=1"))
	wantErr(t, "clone 3 (no third uid)", err, syscall.ENOSPC, "clone 3 of 3", "no free uid", "removed")
	if after := ids(p); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("sandboxes after a clone out of uids %q; want %q", after, before)
	}
	if l := logs.String(); strings.Contains(l, "cannot remove") {
		t.Errorf("the failed clone's clean-up logged an error:\n%s", l)
	}
	sdo(t, s, "kill")
	wantErr(t, "clone of a dead sandbox", s.Ctl(ctx(t), []byte("clone")), syscall.EBUSY, "need running or paused")
}

// TestSnapshotOverTemplate: the first snapshot of a machine restored
// from a template's snapshot is a delta over it; the registry keeps that
// snapshot beside it, unlisted, across a restart.
func TestSnapshotOverTemplate(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(t.TempDir(), "_base-256m1c-0123")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"meta", "mem"} {
		if err := os.WriteFile(filepath.Join(base, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	s := lookup(t, p, "box")
	rt.machine("box").base = base
	sdo(t, s, "snapshot s1")
	sdo(t, s, "snapshot s2")
	s1, _ := p.LookupSnapshot("s1")
	s2, _ := p.LookupSnapshot("s2")
	if s1.Parent != "_base-256m1c-0123" || s1.Full || !strings.Contains(s1.Line(), " parent=_base-256m1c-0123 ") || s2.Parent != "s1" {
		t.Fatalf("s1 %+v, s2 %+v; want s1 over the template's snapshot, s2 over s1", s1, s2)
	}
	if b, err := os.ReadFile(filepath.Join(dir, snapsName, "_base-256m1c-0123", "mem")); err != nil || string(b) != "mem" {
		t.Errorf("the template's snapshot in the registry: %q, %v", b, err)
	}
	p.Close()
	p2, logs := openPlane(t, dir, rt)
	if n := snapNames(p2); len(n) != 2 || strings.Contains(logs.String(), "corrupt") {
		t.Errorf("after restart: snapshots %q, log %s; want s1, s2 and no complaint", n, logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, snapsName, "_base-256m1c-0123", "meta")); err != nil {
		t.Errorf("the template's snapshot after restart: %v", err)
	}
}

// TestSnapshotOrderClockBack: a snapshot taken after another is listed
// after it even when the wall clock reads earlier than the other's time
// (a clock stepped back), also in a plane opened again, which takes the
// newest snapshot's time from the store.
func TestSnapshotOrderClockBack(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	do(t, p, "new box")
	sdo(t, lookup(t, p, "box"), "snapshot s1")
	// s1 as if taken by a clock an hour ahead of today's.
	ahead := time.Now().Add(time.Hour)
	p.mu.Lock()
	si := p.snaps["s1"]
	si.Created, p.snapAt = ahead, ahead
	p.snaps["s1"] = si
	p.mu.Unlock()
	sdo(t, lookup(t, p, "box"), "snapshot s2")
	if n := snapNames(p); !slices.Equal(n, []string{"s1", "s2"}) {
		t.Errorf("listed %q after the clock stepped back; want s1 s2", n)
	}
	latest := lookupSnap(t, p, "s2").Created
	if !latest.After(ahead) {
		t.Errorf("s2 created %v, not after s1's %v", latest, ahead)
	}
	do(t, p, "kill box")
	p.Close()
	p2, _ := openPlane(t, dir, rt)
	if !p2.snapAt.Equal(latest) {
		t.Errorf("a plane opened again starts from %v; want the newest snapshot's %v", p2.snapAt, latest)
	}
}

// lookupSnap is snapshot id's record.
func lookupSnap(t *testing.T, p *Plane, id string) SnapshotInfo {
	t.Helper()
	si, err := p.LookupSnapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return si
}
