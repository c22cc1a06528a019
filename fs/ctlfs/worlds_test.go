package ctlfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWorlds drives a world through every target: world on /ctl, a
// change through worlds/<w>/fs, its diff, upper and status, a bad verb,
// then apply into the lower.
func TestWorlds(t *testing.T) {
	for tname, mk := range makeTargets {
		t.Run(tname, func(t *testing.T) {
			e := newEnv(t, "")
			tg := mk(t, e)
			lower := t.TempDir()
			for p, s := range map[string]string{"a.txt": "alpha", "d/b.txt": "beta"} {
				os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755)
				if err := os.WriteFile(filepath.Join(lower, p), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := writeRead(t, tg, "ctl", "world w lower="+lower); got != "w\n" {
				t.Errorf("world reply %q", got)
			}
			if s, err := readFile(tg, "worlds/w/lower"); err != nil || s != lower+"\n" {
				t.Errorf("lower = %q, %v", s, err)
			}
			if s, err := readFile(tg, "worlds/w/fs/d/b.txt"); err != nil || s != "beta" {
				t.Errorf("fs/d/b.txt = %q, %v", s, err)
			}
			if err := writeFile(tg, "worlds/w/fs/a.txt", "ALPHA"); err != nil {
				t.Fatal(err)
			}
			if s, err := readFile(tg, "worlds/w/diff"); err != nil || s != "modified a.txt\n" {
				t.Errorf("diff = %q, %v", s, err)
			}
			if names, err := tg.readDir("worlds/w/upper"); err != nil || strings.Join(names, " ") != "a.txt" {
				t.Errorf("upper lists %v, %v", names, err)
			}
			if s, err := readFile(tg, "worlds/w/status"); err != nil || !strings.HasPrefix(s, "w mode=overlay ") || !strings.Contains(s, " changes=1 copying=0/0 copied=1/5 copytime=") {
				t.Errorf("status = %q, %v", s, err)
			}
			if err := writeFile(tg, "worlds/w/ctl", "apply now"); errnoOf(err) != syscall.EINVAL {
				t.Errorf("apply now: %v, want EINVAL", err)
			}
			if s, _ := readFile(tg, "err"); !strings.Contains(s, `"now"`) {
				t.Errorf("err = %q", s)
			}
			if err := writeFile(tg, "worlds/w/ctl", "apply"); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(lower, "a.txt")); string(b) != "ALPHA" {
				t.Errorf("lower a.txt = %q after apply", b)
			}
			if s, err := readFile(tg, "worlds/w/diff"); err != nil || s != "" {
				t.Errorf("diff after apply = %q, %v", s, err)
			}
		})
	}
}

// TestWorldRestart: a world and its changes survive a daemon restart.
func TestWorldRestart(t *testing.T) {
	dir, lower := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(lower, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, dir)
	tg := inproc{e.tree.Root()}
	writeRead(t, tg, "ctl", "world keep lower="+lower)
	if err := writeFile(tg, "worlds/keep/fs/f", "new"); err != nil {
		t.Fatal(err)
	}
	e.plane.Close()
	e2 := newEnv(t, dir)
	tg2 := inproc{e2.tree.Root()}
	if s, err := readFile(tg2, "worlds/keep/fs/f"); err != nil || s != "new" {
		t.Errorf("after restart: %q, %v", s, err)
	}
	if s, err := readFile(tg2, "worlds/keep/diff"); err != nil || s != "modified f\n" {
		t.Errorf("diff after restart: %q, %v", s, err)
	}
}

// TestWorldsFUSEInodes: through one FUSE mount, two worlds over one lower
// never share an inode (each world's files are numbered by identity
// within that world), while a hard link's two names in one world are
// one inode.
func TestWorldsFUSEInodes(t *testing.T) {
	e := newEnv(t, "")
	tg := mountFUSE(t, e.tree.Root())
	lower := t.TempDir()
	if err := os.WriteFile(filepath.Join(lower, "a.txt"), []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2"} {
		if got := writeRead(t, tg, "ctl", "world "+w+" lower="+lower); got != w+"\n" {
			t.Fatalf("world reply %q", got)
		}
	}
	p := func(s string) string { return filepath.Join(tg.dir, s) }
	ino := func(s string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(p(s), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	if ino("worlds/w1/fs/a.txt") == ino("worlds/w2/fs/a.txt") {
		t.Errorf("a.txt in two worlds: one inode %d", ino("worlds/w1/fs/a.txt"))
	}
	if err := os.WriteFile(p("worlds/w1/fs/a.txt"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p("worlds/w2/fs/a.txt")); err != nil || string(b) != "alpha" {
		t.Errorf("w2's a.txt after w1's write = %q, %v", b, err)
	}
	if err := os.Link(p("worlds/w1/fs/a.txt"), p("worlds/w1/fs/b.txt")); err != nil {
		t.Fatal(err)
	}
	if a, b := ino("worlds/w1/fs/a.txt"), ino("worlds/w1/fs/b.txt"); a != b {
		t.Errorf("w1's a.txt and its hard link b.txt: inodes %d and %d", a, b)
	}
	if b, err := os.ReadFile(p("worlds/w1/fs/b.txt")); err != nil || string(b) != "one" {
		t.Errorf("b.txt = %q, %v", b, err)
	}
}
