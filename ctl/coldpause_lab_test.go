package ctl

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sandfs/test/testenv"
)

// TestColdBootPauseImagesFold (lab): a cold-booted sandbox (a runtime
// with no template cache) paused to disk and resumed three times keeps
// two pause images, not a chain of three: its first image is full, and
// the later ones are deltas over it that fold the one before in, which
// the next resume drops. The guest's agent answers after every resume.
func TestColdBootPauseImagesFold(t *testing.T) {
	testenv.NeedGuests(t)
	kernel, templates, bin := testenv.Kernel(), testenv.Templates(), testenv.Built("SANDFS_BIN", "bin/sandfs")
	for _, p := range []string{kernel, filepath.Join(templates, "base.ext4"), bin} {
		testenv.NeedFile(t, p, "make build kernel template")
	}
	r := NewVMMRuntime(kernel, templates, nil) // no CacheDir: new boots
	r.Binary = bin
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil { // the jailed VMM reaches its run dir
			t.Fatal(err)
		}
	}
	p, _ := openPlane(t, dir, r)
	c, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ctl := func(s *Sandbox, verb string) {
		t.Helper()
		if err := s.Ctl(c, []byte(verb)); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
	}
	if _, err := p.Ctl(c, []byte("new a mem=256M")); err != nil {
		t.Fatal(err)
	}
	s := lookup(t, p, "a")
	t.Cleanup(func() { s.Ctl(context.Background(), []byte("kill")) })
	sock := filepath.Join(p.st.runDir("a"), "vsock", "vsock.sock")
	agent := func(what string) {
		t.Helper()
		if err := dialAgent(c, sock, 3*time.Minute, 500*time.Millisecond); err != nil {
			t.Fatalf("agent after %s: %v (status %s)", what, err, s.Status())
		}
	}
	agent("the cold boot")
	if st := s.Status(); !strings.Contains(st, " boot=cold") {
		t.Fatalf("status %q; want a cold boot", st)
	}
	store := filepath.Join(WorkDir(Spec{Dir: p.st.runDir("a")}), workSnaps)
	images := func() []string {
		t.Helper()
		ents, err := os.ReadDir(store)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), pauseMark) {
				out = append(out, e.Name())
			}
		}
		slices.Sort(out) // by time: the names are _pause-<unix ns>
		return out
	}
	var first string
	for i := 1; i <= 3; i++ {
		ctl(s, "pause")
		if st := s.Status(); !strings.Contains(st, " pid=0 ") {
			t.Fatalf("status after pause %d: %q; want paused to disk", i, st)
		}
		ctl(s, "resume")
		agent("resume " + strings.Repeat("I", i))
		imgs := images()
		t.Logf("after resume %d: pause images %q", i, imgs)
		if i == 1 {
			first = imgs[0]
		}
		if want := min(i, 2); len(imgs) != want || imgs[0] != first {
			t.Fatalf("pause images after resume %d: %q; want %d, the first (%s) kept", i, imgs, want, first)
		}
	}
}
