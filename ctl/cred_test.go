package ctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sandfs/ctl/cred"
)

// Users of the tests below: neither is root nor the daemon's user.
var (
	alice = cred.Cred{UID: 4001, GID: 4001}
	bob   = cred.Cred{UID: 4002, GID: 4002, Groups: func() []uint32 { return []uint32{4242} }}
)

func as(t *testing.T, c cred.Cred) context.Context { return cred.With(ctx(t), c) }

// TestOwner: a sandbox belongs to the Cred that made it (new on /ctl, or
// an open of /clone), and keeps its owner across a restart of the plane.
func TestOwner(t *testing.T) {
	dir := t.TempDir()
	rt := reattachRuntime{newFakeRuntime()}
	p, _ := openPlane(t, dir, rt)
	if _, err := p.Ctl(as(t, alice), []byte("new a")); err != nil {
		t.Fatal(err)
	}
	c, err := p.Clone(as(t, bob))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ctl(as(t, bob), []byte("start")); err != nil {
		t.Fatal(err)
	}
	do(t, p, "new d") // the daemon itself
	want := map[string]cred.Owner{"a": alice.Owner(), c.ID(): bob.Owner(), "d": cred.Self().Owner()}
	for id, o := range want {
		if got := lookup(t, p, id).Owner(); got != o {
			t.Errorf("%s: Owner() = %+v; want %+v", id, got, o)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "sandboxes", "a.json"))
	if err != nil || !strings.Contains(string(b), `"owner":{"uid":4001,"gid":4001}`) {
		t.Errorf("record of a: %s, %v; want the owner in it", b, err)
	}
	p.Close()

	p2, _ := openPlane(t, dir, rt)
	for id, o := range want {
		if got := lookup(t, p2, id).Owner(); got != o {
			t.Errorf("after restart, %s: Owner() = %+v; want %+v", id, got, o)
		}
	}
}

// TestOwnerOldRecord: a record written before owners existed belongs to
// root.
func TestOwnerOldRecord(t *testing.T) {
	dir := t.TempDir()
	p, _ := openPlane(t, dir, nil)
	p.Close()
	old := `{"format":1,"id":"old","state":"dead","template":"base","mem":268435456,"cpus":1,"timeout_ns":0,"created":"2026-01-01T00:00:00Z"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", "old.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, _ := openPlane(t, dir, nil)
	if got := lookup(t, p2, "old").Owner(); got != (cred.Owner{}) {
		t.Errorf("Owner() of a record without one = %+v; want root", got)
	}
}

// TestControlOthers: kill and rm on /ctl name a sandbox by id; only its
// owner and the privileged may, whatever group they share. The refusal
// changes nothing.
func TestControlOthers(t *testing.T) {
	p, _ := openPlane(t, t.TempDir(), newFakeRuntime())
	if _, err := p.Ctl(as(t, alice), []byte("new a")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ctl(as(t, alice), []byte("new a2")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"kill a", "rm a"} {
		_, err := p.Ctl(as(t, bob), []byte(m))
		wantErr(t, "bob: "+m, err, syscall.EPERM, `sandbox "a" belongs to uid 4001`)
	}
	if got := lookup(t, p, "a").State(); got != StateRunning {
		t.Fatalf("a after bob's kill: %s; want running", got)
	}
	if !strings.Contains(p.Err(), "belongs to uid 4001") {
		t.Errorf("/err = %q; want the refusal", p.Err())
	}
	// The owner, and root, may.
	if _, err := p.Ctl(as(t, alice), []byte("kill a")); err != nil {
		t.Errorf("alice: kill a: %v", err)
	}
	if _, err := p.Ctl(as(t, alice), []byte("rm a")); err != nil {
		t.Errorf("alice: rm a: %v", err)
	}
	if _, err := p.Ctl(as(t, cred.Cred{}), []byte("kill a2")); err != nil {
		t.Errorf("root: kill a2: %v", err)
	}
}
