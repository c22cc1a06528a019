package guestlab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorldGuest: a sandbox created with world=<w> has the world at
// /workspace: it reads the lower, its changes land in the world's upper
// (the lower untouched) and show in diff; apply writes them back.
func TestWorldGuest(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := t.TempDir()
	for _, p := range []string{filepath.Dir(lower), lower} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{"a.txt": "alpha\n", "d/b.txt": "beta\n"} {
		os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(lower, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new t template=base world=w' > ctl")
	d.waitAgent(t, "t")
	out := d.mustSh(t, `echo 'cat /workspace/a.txt; echo guest > /workspace/new.txt; rm /workspace/d/b.txt; ls /workspace /workspace/d; cat /workspace/new.txt' > sandboxes/t/exec; cat sandboxes/t/exec`)
	if want := "alpha\n/workspace:\na.txt\nd\nnew.txt\n\n/workspace/d:\nguest\n"; out != want {
		t.Errorf("in the guest:\n%s\nwant:\n%s", out, want)
	}
	if st := d.mustSh(t, "cat sandboxes/t/execstatus"); !strings.Contains(st, " exited code=0 ") {
		t.Errorf("execstatus = %q", st)
	}
	if got := d.mustSh(t, "cat worlds/w/diff; ls sandboxes/t/worlds"); got != "deleted d/b.txt\nadded new.txt\nw\n" {
		t.Errorf("diff, attached = %q", got)
	}
	if _, err := os.Stat(filepath.Join(lower, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("the lower changed before apply: %v", err)
	}
	d.mustSh(t, "echo apply > worlds/w/ctl")
	if b, err := os.ReadFile(filepath.Join(lower, "new.txt")); err != nil || string(b) != "guest\n" {
		t.Errorf("lower new.txt after apply = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "d/b.txt")); !os.IsNotExist(err) {
		t.Errorf("d/b.txt after apply: %v", err)
	}
	// The guest still sees the world, now all from the lower.
	if got := d.mustSh(t, `echo 'cat /workspace/new.txt; ls /workspace/d | wc -l' > sandboxes/t/exec; cat sandboxes/t/exec`); got != "guest\n0\n" {
		t.Errorf("after apply, in the guest: %q", got)
	}
}
