package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWorldSnapshots: a snapshot of a sandbox with a world keeps the
// world's changes, rollback brings them back, and each clone gets a
// world of its own holding a copy of them.
func TestWorldSnapshots(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
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
	wa := opened["wa"]
	wa.state = "v1"
	sdo(t, s, "snapshot s1")
	if b, err := os.ReadFile(filepath.Join(dir, snapsName, "s1", worldSnapName, worldSnapData, "state")); err != nil || string(b) != "v1" {
		t.Fatalf("the snapshot's world: %q, %v; want v1", b, err)
	}
	wa.state = "v2"
	sdo(t, s, "rollback s1")
	if wa.state != "v1" || s.State() != StateRunning {
		t.Errorf("after rollback: world %q, %s; want v1, running", wa.state, s.State())
	}

	wa.state = "v3"
	reply, err := s.CtlReply(as(t, alice), []byte("clone 2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(reply) {
		c := lookup(t, p, id)
		name := c.Config().World
		f := opened[name]
		if name != "wa-"+id || f == nil || f.state != "v3" || f == wa {
			t.Errorf("clone %s: world %q (%+v); want its own wa-%s holding v3", id, name, f, id)
			continue
		}
		if wi, err := p.LookupWorld(name); err != nil || wi.Owner != alice.Owner() || wi.Lower != lower || wi.Mode != "overlay" {
			t.Errorf("clone %s's world: %+v, %v", id, wi, err)
		}
	}
	if wa.state != "v3" {
		t.Errorf("the source's world after the clone: %q", wa.state)
	}
	// A clone that fails leaves no world behind.
	rt.mu.Lock()
	rt.failRestore = len(rt.froms) + 2
	rt.mu.Unlock()
	before := len(p.Worlds())
	if err := s.Ctl(as(t, alice), []byte("clone 3 concurrency=1")); err == nil {
		t.Fatal("a clone whose second restore fails succeeded")
	}
	if n := len(p.Worlds()); n != before {
		t.Errorf("worlds after a failed clone: %d, want %d", n, before)
	}
	if _, err := p.Ctl(as(t, bob), []byte("new other from=s1")); Errno(err) != syscall.EPERM {
		t.Errorf("bob from alice's snapshot: %v", err)
	}
}

func TestForkName(t *testing.T) {
	long := strings.Repeat("w", 63)
	id62 := strings.Repeat("i", 62)
	for _, tc := range []struct {
		w, id string
		n     int
		want  string
	}{
		{"wa", "b1", 1, "wa-b1"},
		{"wa", "b1", 2, "wa-b1-2"},
		{long, "b1", 1, long[:60] + "-b1"},
		{long, "b1", 12, long[:57] + "-b1-12"},
		{"wa", long, 1, long},
		{"wa", long, 3, long[:61] + "-3"},
		{"wa", id62, 1, id62},
		{"wa", id62, 100, id62[:59] + "-100"},
	} {
		if got := forkName(tc.w, tc.id, tc.n); got != tc.want || !ValidName(got) {
			t.Errorf("forkName(%q, %q, %d) = %q; want %q", tc.w, tc.id, tc.n, got, tc.want)
		}
	}
}

// TestForkNameTaken: a sandbox made from a snapshot with a world gets a
// world of its own even when the first name for it is taken (a world
// its owner made with that name; an id as long as a name, whose fork
// is named as the id): the next name, not EEXIST.
func TestForkNameTaken(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	opened := map[string]*fakeWorld{}
	p.SetWorldOpener(worldsOpener(opened))
	lower := readableLower(t)
	long := strings.Repeat("b", 63)
	for _, c := range []string{"world wa lower=" + lower, "world wa-b2 lower=" + lower, "world " + long + " lower=" + lower, "new box world=wa"} {
		if _, err := p.Ctl(as(t, alice), []byte(c)); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}
	opened["wa"].state = "v1"
	sdo(t, lookup(t, p, "box"), "snapshot s1")
	for id, want := range map[string]string{"b2": "wa-b2-2", long: long[:61] + "-2"} {
		if _, err := p.Ctl(as(t, alice), []byte("new "+id+" from=s1")); err != nil {
			t.Fatalf("new %s from=s1: %v", id, err)
		}
		if got := lookup(t, p, id).Config().World; got != want || opened[got] == nil || opened[got].state != "v1" {
			t.Errorf("sandbox %s's world: %q; want %s holding v1", id, got, want)
		}
	}
}
