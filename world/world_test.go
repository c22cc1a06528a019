package world

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
	"sandfs/test/testenv"
)

// newLower makes a small lower tree.
func newLower(t *testing.T) string {
	t.Helper()
	lower := t.TempDir()
	files := map[string]string{"a.txt": "alpha", "dir/b.txt": "beta", "dir/sub/c.txt": "gamma", "del.txt": "x"}
	for p, s := range files {
		if err := os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lower, p), []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(lower, "link")); err != nil {
		t.Fatal(err)
	}
	return lower
}

func openWorld(t *testing.T, lower string, mode Mode) *World {
	t.Helper()
	w, err := Open(lower, t.TempDir(), mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func nodes(t *testing.T, w *World) nodeTarget {
	t.Helper()
	root, err := w.Root()
	if err != nil {
		t.Fatal(err)
	}
	return nodeTarget{root}
}

// targets runs f against the union in-process and, if fuse is set,
// through FUSE.
func targets(t *testing.T, fuse bool, f func(t *testing.T, lower string, w *World, tg target)) {
	t.Run("nodes", func(t *testing.T) {
		lower := newLower(t)
		w := openWorld(t, lower, Overlay)
		f(t, lower, w, nodes(t, w))
	})
	if !fuse {
		return
	}
	t.Run("fuse", func(t *testing.T) {
		lower := newLower(t)
		w := openWorld(t, lower, Overlay)
		f(t, lower, w, mountFUSE(t, w))
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantFile(t *testing.T, tg target, p, want string) {
	t.Helper()
	if got, err := tg.read(p); err != nil || got != want {
		t.Errorf("read %s = %q, %v; want %q", p, got, err, want)
	}
}

func wantDisk(t *testing.T, path, want string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != want {
		t.Errorf("%s on disk = %q, %v; want %q", path, b, err, want)
	}
}

func wantGone(t *testing.T, tg target, p string) {
	t.Helper()
	if _, err := tg.stat(p); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat %s: %v, want ENOENT", p, err)
	}
}

func diffText(t *testing.T, w *World) string {
	t.Helper()
	chs, err := w.Diff()
	must(t, err)
	var lines []string
	for _, c := range chs {
		lines = append(lines, c.String())
	}
	return strings.Join(lines, "\n")
}

// TestSeedTable is seed 000's operation table: read unmodified, modify,
// create, delete, apply.
func TestSeedTable(t *testing.T) {
	targets(t, true, func(t *testing.T, lower string, w *World, tg target) {
		wantFile(t, tg, "dir/b.txt", "beta")
		must(t, tg.write("dir/b.txt", "BETA"))
		must(t, tg.write("new.txt", "fresh"))
		must(t, tg.remove("del.txt"))
		wantFile(t, tg, "dir/b.txt", "BETA")
		wantFile(t, tg, "new.txt", "fresh")
		wantGone(t, tg, "del.txt")
		wantDisk(t, filepath.Join(lower, "dir/b.txt"), "beta")
		wantDisk(t, filepath.Join(lower, "del.txt"), "x")
		wantDisk(t, filepath.Join(w.Upper(), "dir/b.txt"), "BETA")
		wantDisk(t, filepath.Join(w.Upper(), ".wh.del.txt"), "")
		if got, want := diffText(t, w), "deleted del.txt\nmodified dir/b.txt\nadded new.txt"; got != want {
			t.Errorf("diff:\n%s\nwant:\n%s", got, want)
		}
		must(t, w.Apply(false))
		wantDisk(t, filepath.Join(lower, "dir/b.txt"), "BETA")
		wantDisk(t, filepath.Join(lower, "new.txt"), "fresh")
		if _, err := os.Stat(filepath.Join(lower, "del.txt")); !os.IsNotExist(err) {
			t.Errorf("del.txt in the lower after apply: %v", err)
		}
		if ents, _ := os.ReadDir(w.Upper()); len(ents) != 0 {
			t.Errorf("upper after apply: %v", ents)
		}
		if d := diffText(t, w); d != "" {
			t.Errorf("diff after apply: %q", d)
		}
		wantFile(t, tg, "dir/b.txt", "BETA")
		wantGone(t, tg, "del.txt")
	})
}

// TestPOSIX: renames, links, symlinks, chmod, directories, readdir and
// inode numbers behave as on a local file system.
func TestPOSIX(t *testing.T) {
	targets(t, true, func(t *testing.T, lower string, w *World, tg target) {
		before, err := tg.stat("a.txt")
		must(t, err)
		must(t, tg.chmod("a.txt", 0o600))
		after, err := tg.stat("a.txt")
		must(t, err)
		if after.Mode.Perm() != 0o600 || after.Size != 5 {
			t.Errorf("after chmod: %v size %d", after.Mode, after.Size)
		}
		if _, ok := tg.(nodeTarget); ok && after.Ino != before.Ino {
			t.Errorf("inode changed by copy-up: %d -> %d", before.Ino, after.Ino)
		}
		if fi, _ := os.Stat(filepath.Join(lower, "a.txt")); fi.Mode().Perm() != 0o640 {
			t.Errorf("lower's mode changed: %v", fi.Mode())
		}
		wantFile(t, tg, "a.txt", "alpha")

		must(t, tg.rename("dir/b.txt", "moved.txt"))
		wantFile(t, tg, "moved.txt", "beta")
		wantGone(t, tg, "dir/b.txt")
		if err := tg.rename("dir", "dir2"); !errors.Is(err, syscall.EXDEV) {
			t.Errorf("rename of a lower directory: %v, want EXDEV", err)
		}

		must(t, tg.link("del.txt", "hard.txt"))
		if a, _ := tg.stat("hard.txt"); a.Nlink != 2 {
			t.Errorf("nlink %d, want 2", a.Nlink)
		}
		must(t, tg.write("hard.txt", "both"))
		wantFile(t, tg, "del.txt", "both")

		if s, err := tg.readlink("link"); err != nil || s != "a.txt" {
			t.Errorf("readlink = %q, %v", s, err)
		}
		must(t, tg.symlink("../../etc/passwd", "dir/esc"))
		if s, _ := tg.readlink("dir/esc"); s != "../../etc/passwd" {
			t.Errorf("symlink text %q", s)
		}

		// A deleted directory recreated is empty (opaque).
		for _, p := range []string{"dir/sub/c.txt", "dir/esc"} {
			must(t, tg.remove(p))
		}
		if err := tg.rmdir("dir"); !errors.Is(err, syscall.ENOTEMPTY) {
			t.Errorf("rmdir of a non-empty dir: %v", err)
		}
		must(t, tg.rmdir("dir/sub"))
		must(t, tg.rmdir("dir"))
		wantGone(t, tg, "dir")
		must(t, tg.mkdir("dir"))
		if names, err := tg.list("dir"); err != nil || len(names) != 0 {
			t.Errorf("recreated dir lists %v, %v", names, err)
		}
		names, err := tg.list("")
		must(t, err)
		if got, want := strings.Join(names, " "), "a.txt del.txt dir hard.txt link moved.txt"; got != want {
			t.Errorf("root lists %q, want %q", got, want)
		}
		if err := tg.write(".wh.x", "no"); err == nil {
			t.Error("created a reserved .wh. name")
		}
		if got, want := diffText(t, w), "modified a.txt\nmodified del.txt\ndeleted dir\nadded dir\nadded hard.txt\nadded moved.txt"; got != want {
			t.Errorf("diff:\n%s\nwant:\n%s", got, want)
		}
		wantDisk(t, filepath.Join(lower, "dir/sub/c.txt"), "gamma")
	})
}

// TestOwner: what the world adds belongs to the caller, and keeps that
// owner when applied to the lower.
func TestOwner(t *testing.T) {
	testenv.NeedRoot(t)
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	r, err := w.Root()
	must(t, err)
	root := r.(*Dir)
	alice := cred.With(bg, cred.Cred{UID: 4001, GID: 4002})
	_, h, err := root.Create(alice, "f", sfs.WriteOnly, 0o640)
	must(t, err)
	h.Close()
	_, err = root.Mkdir(alice, "d2", iofs.ModeDir|0o750)
	must(t, err)
	_, err = root.Symlink(alice, "f", "l2")
	must(t, err)
	must(t, w.Apply(false))
	for _, p := range []string{"f", "d2", "l2"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(lower, p), &st))
		if st.Uid != 4001 || st.Gid != 4002 {
			t.Errorf("%s in the lower: %d:%d, want 4001:4002", p, st.Uid, st.Gid)
		}
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(lower, "f"), &st))
	if st.Mode&0o7777 != 0o640 {
		t.Errorf("f mode %o, want 640", st.Mode&0o7777)
	}
}
