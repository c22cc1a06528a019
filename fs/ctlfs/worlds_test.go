package ctlfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestWorldsInodes: through the daemon's FUSE mount and through sandfs
// mount (FUSE over 9P), two worlds over one lower never share an inode
// (each world's files are numbered by identity within that world),
// while a hard link's two names in one world are one inode, also after
// a rename; over 9P the same holds for QID paths, which a client such as
// Linux's takes for inode numbers (and diff, tar and cp after it).
// Through FUSE a number holds while the kernel knows the inode, so the
// files compared are held (O_PATH): one the kernel forgets between two
// stats, as under memory pressure, comes back with another number.
func TestWorldsInodes(t *testing.T) {
	for _, tname := range []string{"fuse", "bridge-unix"} {
		t.Run(tname, func(t *testing.T) {
			e := newEnv(t, "")
			tg := makeTargets[tname](t, e).(osTarget)
			twoWorlds(t, tg, t.TempDir())
			p := func(s string) string { return filepath.Join(tg.dir, s) }
			hold := func(s string) {
				fd, err := unix.Open(p(s), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(s, err)
				}
				t.Cleanup(func() { unix.Close(fd) })
			}
			hold("worlds/w1/fs/a.txt")
			hold("worlds/w2/fs/a.txt")
			ino := func(s string) uint64 {
				var st syscall.Stat_t
				if err := syscall.Stat(p(s), &st); err != nil {
					t.Fatal(s, err)
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
			hold("worlds/w1/fs/a.txt") // the copy-up's file
			if err := os.Link(p("worlds/w1/fs/a.txt"), p("worlds/w1/fs/b.txt")); err != nil {
				t.Fatal(err)
			}
			if a, b := ino("worlds/w1/fs/a.txt"), ino("worlds/w1/fs/b.txt"); a != b {
				t.Errorf("w1's a.txt and its hard link b.txt: inodes %d and %d", a, b)
			}
			if err := os.Rename(p("worlds/w1/fs/b.txt"), p("worlds/w1/fs/c.txt")); err != nil {
				t.Fatal(err)
			}
			if a, c := ino("worlds/w1/fs/a.txt"), ino("worlds/w1/fs/c.txt"); a != c {
				t.Errorf("w1's a.txt and its hard link renamed c.txt: inodes %d and %d", a, c)
			}
			if b, err := os.ReadFile(p("worlds/w1/fs/c.txt")); err != nil || string(b) != "one" {
				t.Errorf("c.txt = %q, %v", b, err)
			}
			ents, err := os.ReadDir(p("worlds/w1/fs"))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ents {
				hold("worlds/w1/fs/" + d.Name())
				if info, err := d.Info(); err != nil || info.Sys().(*syscall.Stat_t).Ino != ino("worlds/w1/fs/"+d.Name()) {
					t.Errorf("w1's %s: its listing's inode differs from its stat's (%v)", d.Name(), err)
				}
			}
		})
	}
	t.Run("9p", func(t *testing.T) {
		e := newEnv(t, "")
		tg := makeTargets["9p"](t, e).(p9Target)
		lower := t.TempDir()
		twoWorlds(t, tg, lower)
		if err := os.Link(filepath.Join(lower, "a.txt"), filepath.Join(lower, "hard.txt")); err != nil {
			t.Fatal(err)
		}
		qid := func(p string) uint64 {
			qs, f, err := tg.root.Walk(strings.Split(p, "/"))
			if err != nil {
				t.Fatalf("walk %s: %v", p, err)
			}
			f.Close()
			return qs[len(qs)-1].Path
		}
		if qid("worlds/w1/fs/a.txt") == qid("worlds/w2/fs/a.txt") {
			t.Errorf("a.txt in two worlds: one QID path %#x", qid("worlds/w1/fs/a.txt"))
		}
		if qid("worlds/w1/fs/a.txt") != qid("worlds/w1/fs/hard.txt") {
			t.Errorf("a.txt and its hard link in w1: QID paths %#x and %#x", qid("worlds/w1/fs/a.txt"), qid("worlds/w1/fs/hard.txt"))
		}
		if q := qid("worlds/w1/fs/a.txt"); q&(1<<63) != 0 {
			t.Errorf("a.txt's QID path %#x has the bit of the numbers the server makes up", q)
		}
	})
}

// twoWorlds makes worlds w1 and w2 over lower, which gets a.txt.
func twoWorlds(t *testing.T, tg target, lower string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(lower, "a.txt"), []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2"} {
		if got := writeRead(t, tg, "ctl", "world "+w+" lower="+lower); got != w+"\n" {
			t.Fatalf("world reply %q", got)
		}
	}
}

// TestWorldsRename: a renamed file and a renamed directory's files are
// reachable by their new names at once, through the daemon's FUSE mount
// and through sandfs mount, whose nodes name their files by path (a
// remote node that kept its old path answered ENOENT).
func TestWorldsRename(t *testing.T) {
	for _, tname := range []string{"fuse", "bridge-unix"} {
		t.Run(tname, func(t *testing.T) {
			e := newEnv(t, "")
			tg := makeTargets[tname](t, e).(osTarget)
			twoWorlds(t, tg, t.TempDir())
			p := func(s string) string { return filepath.Join(tg.dir, "worlds/w1/fs", s) }
			if err := os.MkdirAll(p("d/e"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"x.txt", "d/e/y.txt"} {
				if err := os.WriteFile(p(f), []byte(f), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(p(f)); err != nil { // the kernel knows its inode
					t.Fatal(err)
				}
			}
			for _, mv := range [][2]string{{"x.txt", "x2.txt"}, {"a.txt", "a2.txt"}, {"d", "d2"}} {
				if err := os.Rename(p(mv[0]), p(mv[1])); err != nil {
					t.Fatal(err)
				}
			}
			for f, want := range map[string]string{"x2.txt": "x.txt", "a2.txt": "alpha", "d2/e/y.txt": "d/e/y.txt"} {
				if b, err := os.ReadFile(p(f)); err != nil || string(b) != want {
					t.Errorf("%s after the renames = %q, %v; want %q", f, b, err, want)
				}
			}
			if err := os.WriteFile(p("d2/e/y.txt"), []byte("again"), 0o644); err != nil {
				t.Errorf("write to d2/e/y.txt: %v", err)
			}
		})
	}
}
