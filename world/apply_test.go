package world

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTwoWorldsConflict: two worlds editing one file each see only their
// own edit; applying one then the other reports the conflict.
func TestTwoWorldsConflict(t *testing.T) {
	lower := newLower(t)
	w1, w2 := openWorld(t, lower, Overlay), openWorld(t, lower, Overlay)
	t1, t2 := nodes(t, w1), nodes(t, w2)
	must(t, t1.write("a.txt", "one"))
	must(t, t2.write("a.txt", "two"))
	must(t, t2.write("dir/b.txt", "two's b"))
	wantFile(t, t1, "a.txt", "one")
	wantFile(t, t2, "a.txt", "two")
	must(t, w1.Apply(false))
	wantDisk(t, filepath.Join(lower, "a.txt"), "one")

	err := w2.Apply(false)
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "a.txt" || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second apply: %v; want a conflict on a.txt (EBUSY)", err)
	}
	wantDisk(t, filepath.Join(lower, "a.txt"), "one")
	wantDisk(t, filepath.Join(lower, "dir/b.txt"), "beta") // nothing changed
	wantFile(t, t2, "a.txt", "two")

	// The conflict survives a reopen of the world (its origins are on disk).
	dir := w2.dir
	w2.Close()
	w2, err = Open(lower, dir, Overlay)
	must(t, err)
	defer w2.Close()
	if err := w2.Apply(false); !errors.As(err, &ce) {
		t.Fatalf("apply after reopen: %v, want the conflict", err)
	}
	must(t, w2.Apply(true))
	wantDisk(t, filepath.Join(lower, "a.txt"), "two")
	wantDisk(t, filepath.Join(lower, "dir/b.txt"), "two's b")
}

// TestDeleteConflict: deleting a file the lower changed since is a
// conflict too; deleting one the lower deleted as well is not.
func TestDeleteConflict(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.remove("a.txt"))
	must(t, tg.remove("del.txt"))
	must(t, os.WriteFile(filepath.Join(lower, "a.txt"), []byte("changed meanwhile"), 0o640))
	must(t, os.Remove(filepath.Join(lower, "del.txt")))
	var ce *ConflictError
	if err := w.Apply(false); !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "a.txt" {
		t.Fatalf("apply: %v, want a conflict on a.txt only", err)
	}
	n, err := w.Rebase()
	must(t, err)
	if n != 1 {
		t.Errorf("rebase dropped %d changes, want 1 (del.txt)", n)
	}
	if got := diffText(t, w); got != "deleted a.txt" {
		t.Errorf("diff after rebase: %q", got)
	}
}

// TestApplyResumes: an Apply killed after a file reached the lower but
// before its upper entry went is completed by a re-run, without a
// conflict.
func TestApplyResumes(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("a.txt", "new a"))
	must(t, tg.write("dir/b.txt", "new b"))
	must(t, tg.remove("del.txt"))
	// What a kill after the first rename and the deletion leaves.
	must(t, os.WriteFile(filepath.Join(lower, "a.txt"), []byte("new a"), 0o640))
	must(t, os.Remove(filepath.Join(lower, "del.txt")))
	must(t, w.Apply(false))
	wantDisk(t, filepath.Join(lower, "a.txt"), "new a")
	wantDisk(t, filepath.Join(lower, "dir/b.txt"), "new b")
	if ents, _ := os.ReadDir(w.Upper()); len(ents) != 0 {
		t.Errorf("upper after apply: %v", ents)
	}
}

// TestDiscard: the upper is emptied in one exchange; a discard killed
// after the exchange leaves the old upper in work/, removed at Open.
func TestDiscard(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("a.txt", "mine"))
	must(t, tg.remove("del.txt"))
	must(t, w.Discard())
	wantFile(t, tg, "a.txt", "alpha")
	wantFile(t, tg, "del.txt", "x")
	if d := diffText(t, w); d != "" {
		t.Errorf("diff after discard: %q", d)
	}
	must(t, os.MkdirAll(filepath.Join(w.dir, "work", scratch, "left"), 0o700))
	dir := w.dir
	w.Close()
	w2, err := Open(lower, dir, Overlay)
	must(t, err)
	defer w2.Close()
	if _, err := os.Stat(filepath.Join(dir, "work", scratch)); !os.IsNotExist(err) {
		t.Errorf("a killed discard's upper is still there: %v", err)
	}
}

// TestModes: a read-only world refuses changes; an unsafe-rw world
// writes straight into the lower and has no diff.
func TestModes(t *testing.T) {
	lower := newLower(t)
	ro := nodes(t, openWorld(t, lower, ReadOnly))
	wantFile(t, ro, "a.txt", "alpha")
	for name, err := range map[string]error{
		"write":  ro.write("a.txt", "x"),
		"create": ro.write("n.txt", "x"),
		"remove": ro.remove("a.txt"),
		"mkdir":  ro.mkdir("d2"),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("read-only %s: %v, want EROFS", name, err)
		}
	}
	w := openWorld(t, lower, UnsafeRW)
	rw := nodes(t, w)
	must(t, rw.write("a.txt", "direct"))
	must(t, rw.remove("del.txt"))
	wantDisk(t, filepath.Join(lower, "a.txt"), "direct")
	if _, err := os.Stat(filepath.Join(lower, "del.txt")); !os.IsNotExist(err) {
		t.Errorf("del.txt: %v", err)
	}
	if err := w.Apply(false); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("apply of unsafe-rw: %v, want EINVAL", err)
	}
}

// TestApplyTree: renames, new directories, symbolic links and a replaced
// directory reach the lower as the world shows them.
func TestApplyTree(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.rename("dir/b.txt", "b2.txt"))
	must(t, tg.mkdir("new"))
	must(t, tg.write("new/f", "f"))
	must(t, tg.symlink("../outside", "new/l"))
	must(t, tg.remove("dir/sub/c.txt"))
	must(t, tg.rmdir("dir/sub"))
	must(t, tg.mkdir("dir/sub"))
	must(t, tg.write("dir/sub/d", "d"))
	must(t, w.Apply(false))
	wantDisk(t, filepath.Join(lower, "b2.txt"), "beta")
	wantDisk(t, filepath.Join(lower, "new/f"), "f")
	wantDisk(t, filepath.Join(lower, "dir/sub/d"), "d")
	if s, err := os.Readlink(filepath.Join(lower, "new/l")); err != nil || s != "../outside" {
		t.Errorf("link in the lower: %q, %v", s, err)
	}
	for _, p := range []string{"dir/b.txt", "dir/sub/c.txt"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); !os.IsNotExist(err) {
			t.Errorf("%s still in the lower: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(w.Upper()); len(ents) != 0 {
		t.Errorf("upper after apply: %v", ents)
	}
	names, err := tg.list("dir/sub")
	must(t, err)
	if len(names) != 1 || names[0] != "d" {
		t.Errorf("dir/sub lists %v", names)
	}
}

// TestUpperView: the upper as a plain read-only directory, whiteouts
// shown, following the upper through Discard.
func TestUpperView(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("dir/b.txt", "B"))
	must(t, tg.remove("del.txt"))
	root, err := w.UpperView()
	must(t, err)
	v := nodeTarget{root}
	names, err := v.list("")
	must(t, err)
	if got := strings.Join(names, " "); got != ".wh.del.txt dir" {
		t.Errorf("upper lists %q", got)
	}
	wantFile(t, v, "dir/b.txt", "B")
	wantFile(t, v, ".wh.del.txt", "")
	if err := v.write("x", "y"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write in the upper view: %v, want EROFS", err)
	}
	if s, err := w.Status(); err != nil || s != "changes=2 copying=0/0 copied=0/0 copytime=0ms" {
		t.Errorf("status %q, %v", s, err)
	}
	must(t, w.Discard())
	if names, err := v.list(""); err != nil || len(names) != 0 {
		t.Errorf("upper after discard lists %v, %v", names, err)
	}
}
