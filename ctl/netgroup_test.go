package ctl

import (
	"strings"
	"syscall"
	"testing"
)

// TestNetGroup: new's group= gives each member an address of its own in
// its group's /24 (the group's the first member got, the lowest free
// member number), handed to the runtime in Spec.Member and kept across a
// restart; another group gets the next /24; rm frees a member number; a
// clone gets a new address; a bad name is EINVAL and creates nothing.
func TestNetGroup(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	p, _ := openPlane(t, dir, rt)
	member := func(id string) string {
		t.Helper()
		s, err := p.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cfg.Group + " " + s.cfg.Member
	}
	do(t, p, "new a group=lab")
	if got := rt.lastSpec().Member; got != "100.126.0.1" {
		t.Errorf("Spec.Member of a = %q; want 100.126.0.1", got)
	}
	do(t, p, "new b group=other")
	do(t, p, "new c group=lab")
	do(t, p, "new d")
	for id, want := range map[string]string{"a": "lab 100.126.0.1", "b": "other 100.126.1.1", "c": "lab 100.126.0.2", "d": " "} {
		if got := member(id); got != want {
			t.Errorf("%s: group and member %q; want %q", id, got, want)
		}
	}
	do(t, p, "kill a")
	do(t, p, "rm a")
	do(t, p, "new e group=lab")
	if got := member("e"); got != "lab 100.126.0.1" {
		t.Errorf("e after a's rm: %q; want lab 100.126.0.1", got)
	}
	reply, err := lookup(t, p, "c").CtlReply(ctx(t), []byte("clone"))
	if err != nil {
		t.Fatalf("clone of c: %v", err)
	}
	if got := member(strings.TrimSpace(reply)); got != "lab 100.126.0.3" {
		t.Errorf("c's clone: %q; want lab 100.126.0.3", got)
	}
	if _, err := p.Ctl(ctx(t), []byte("new f group=Bad_name")); Errno(err) != syscall.EINVAL {
		t.Errorf("new f group=Bad_name: %v; want EINVAL", err)
	}
	if _, err := p.Lookup("f"); err == nil {
		t.Error("a bad group= created sandbox f")
	}
	p.Close()
	p2, _ := openPlane(t, dir, newFakeRuntime())
	p = p2
	for id, want := range map[string]string{"b": "other 100.126.1.1", "c": "lab 100.126.0.2", "e": "lab 100.126.0.1"} {
		if got := member(id); got != want {
			t.Errorf("%s after a restart: %q; want %q", id, got, want)
		}
	}
	do(t, p, "new g group=lab")
	if got := member("g"); got != "lab 100.126.0.4" {
		t.Errorf("g after a restart: %q; want lab 100.126.0.4", got)
	}
}
