package ctl

import (
	"slices"
	"testing"
	"time"
)

// setRetain sets p's rules without the loop, for passes the test runs.
func setRetain(p *Plane, r Retention) {
	p.mu.Lock()
	p.retain = r
	p.mu.Unlock()
}

// settledPass is a retention pass at now that found no sandbox busy: a
// pass that finds one (its operation lock held, here by the sandbox's own
// background work, which a slow machine such as the lab stretches) leaves
// everything for the next one, as retainLoop retries it.
func settledPass(t *testing.T, p *Plane, now time.Time) []string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		gone, busy := p.retainPass(now)
		if !busy {
			return gone
		}
		if gone != nil {
			t.Fatalf("a busy pass removed %q", gone)
		}
		if time.Now().After(deadline) {
			t.Fatal("every retention pass for 30 s found a sandbox busy")
		}
	}
}

// TestRetentionKeep: beyond the newest Keep of a sandbox, snapshots go
// as rm takes them (one with a delta over it leaves the listing, its
// files stay); each sandbox counts apart; the one a sandbox stands on
// (its next delta's parent) stays.
func TestRetentionKeep(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, newFakeRuntime())
	do(t, p, "new box")
	do(t, p, "new other")
	s, o := lookup(t, p, "box"), lookup(t, p, "other")
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		sdo(t, s, "snapshot "+n)
	}
	sdo(t, o, "snapshot o1")
	sdo(t, o, "snapshot o2")
	sdo(t, o, "pause")
	sdo(t, o, "rollback o1") // other now stands on o1, the older
	if gone, busy := p.retainPass(time.Now()); gone != nil || busy {
		t.Fatalf("a pass without rules removed %q (busy %v)", gone, busy)
	}
	setRetain(p, Retention{Keep: 1})
	if gone := settledPass(t, p, time.Now()); !slices.Equal(gone, []string{"s1", "s2", "s3"}) {
		t.Fatalf("pass with keep=1 removed %q; want s1 s2 s3", gone)
	}
	if n, e := snapNames(p), storeEntries(t, dir); !slices.Equal(n, []string{"s4", "o1", "o2"}) || !slices.Equal(e, []string{"o1", "o2", "s1", "s2", "s3", "s4"}) {
		t.Errorf("after the pass: listed %q, store %q; want s4 o1 o2 listed, the chain kept", n, e)
	}
	do(t, p, "new b2 from=s4") // its chain still resolves
	// s4's removal takes its unlisted chain with it.
	sdo(t, s, "kill")
	do(t, p, "rm box")
	if err := p.SnapshotCtl(ctx(t), "s4", []byte("rm")); err != nil {
		t.Fatal(err)
	}
	if e := storeEntries(t, dir); !slices.Equal(e, []string{"o1", "o2"}) {
		t.Errorf("store after rm s4: %q; want o1 o2", e)
	}
}

// TestRetentionAge: snapshots older than MaxAge go, except the one a
// sandbox stands on and the one a pause image is over; a sandbox busy
// with an operation defers the pass.
func TestRetentionAge(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, newFakeRuntime())
	do(t, p, "new box")
	do(t, p, "new paused")
	s, ps := lookup(t, p, "box"), lookup(t, p, "paused")
	sdo(t, s, "snapshot a1")
	sdo(t, s, "snapshot a2")
	sdo(t, ps, "snapshot p1")
	sdo(t, ps, "snapshot p2")
	sdo(t, ps, "pause")
	sdo(t, ps, "rollback p1")
	// As a pause to disk records it: its image is over p2 (the fake
	// machine does not pause to disk).
	ps.op.Lock()
	ps.mu.Lock()
	ps.disk = "_pause-1 paused img1 p2"
	ps.mu.Unlock()
	ps.op.Unlock()
	setRetain(p, Retention{MaxAge: time.Hour})
	if gone := settledPass(t, p, time.Now()); gone != nil {
		t.Fatalf("young snapshots removed: %q", gone)
	}
	s.op.Lock()
	gone, busy := p.retainPass(time.Now().Add(2 * time.Hour))
	s.op.Unlock()
	if gone != nil || !busy {
		t.Fatalf("pass during an operation: removed %q, busy %v; want nothing, busy", gone, busy)
	}
	if gone = settledPass(t, p, time.Now().Add(2*time.Hour)); !slices.Equal(gone, []string{"a1"}) {
		t.Fatalf("old snapshots removed %q; want a1 (a2: box's last, p1: paused's last, p2: its pause image's root)", gone)
	}
	if n := snapNames(p); !slices.Equal(n, []string{"a2", "p1", "p2"}) {
		t.Errorf("listed %q; want a2 p1 p2", n)
	}
}

// TestRetentionLoop: SetRetention's loop applies the rules after a
// snapshot.
func TestRetentionLoop(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, newFakeRuntime())
	do(t, p, "new box")
	s := lookup(t, p, "box")
	sdo(t, s, "snapshot s1")
	p.SetRetention(Retention{Keep: 1})
	sdo(t, s, "snapshot s2")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if n := snapNames(p); slices.Equal(n, []string{"s2"}) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("listed %q a minute after the snapshot; want s2 alone", n)
		}
	}
}
