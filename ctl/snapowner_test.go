package ctl

import (
	"syscall"
	"testing"
)

// TestRollbackReusedName: a snapshot outlives its sandbox and sandbox
// names are the creators' choice, so another user's new sandbox can carry
// the name of a removed one. Its rollback to the old sandbox's snapshot
// must be refused (it would restore another user's memory and disk).
func TestRollbackReusedName(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	p, _ := openPlane(t, dir, rt)
	if _, err := p.Ctl(as(t, alice), []byte("new box")); err != nil {
		t.Fatal(err)
	}
	rt.machine("box").marker = "alice's"
	if err := lookup(t, p, "box").Ctl(as(t, alice), []byte("snapshot s1")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"kill box", "rm box"} {
		if _, err := p.Ctl(as(t, alice), []byte(m)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	if _, err := p.Ctl(as(t, bob), []byte("new box")); err != nil {
		t.Fatal(err)
	}
	s := lookup(t, p, "box")
	s.Ctl(as(t, bob), []byte("pause"))
	err := s.Ctl(as(t, bob), []byte("rollback s1"))
	if m := rt.machine("box"); err == nil || m.marker == "alice's" {
		t.Fatalf("bob's rollback of his box to alice's s1 = %v (machine %q); want EPERM", err, m.marker)
	}
	wantErr(t, "rollback s1", err, syscall.EPERM, `snapshot "s1" belongs to uid 4001`)
	if l := s.Snapshots(); len(l) != 0 {
		t.Errorf("bob's box lists %v; want none of alice's", l)
	}
}
