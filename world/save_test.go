package world

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSaveRestore: Save keeps the changes as they were (later changes
// of the world do not reach the copy); Restore brings them back, into
// the same world (a rollback) and into another (a clone): contents,
// whiteouts, hard links, symbolic links, the lower's inode numbers and
// the bases apply checks conflicts against.
func TestSaveRestore(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("a.txt", "saved"))
	must(t, tg.write("new.txt", "fresh"))
	must(t, tg.remove("del.txt"))
	must(t, tg.link("new.txt", "hard.txt"))
	must(t, tg.symlink("a.txt", "sl"))
	lowerA, err := os.Stat(filepath.Join(lower, "a.txt"))
	must(t, err)
	want := diffText(t, w)

	saved := filepath.Join(t.TempDir(), "world")
	st, err := w.Save(saved)
	must(t, err)
	if st.Cloned+st.Copied != 3 || st.Bytes != 10 {
		t.Errorf("save stats %+v, want 3 files (a.txt, new.txt once, a whiteout), 10 bytes", st)
	}
	if _, err := w.Save(saved); !errors.Is(err, os.ErrExist) {
		t.Errorf("save into an existing directory: %v", err)
	}

	must(t, tg.write("a.txt", "later"))
	must(t, tg.remove("new.txt"))
	must(t, tg.write("other.txt", "x"))
	wantDisk(t, filepath.Join(saved, savedUpper, "a.txt"), "saved")

	check := func(t *testing.T, w *World) {
		tg := nodes(t, w)
		if got := diffText(t, w); got != want {
			t.Errorf("diff after restore:\n%s\nwant:\n%s", got, want)
		}
		wantFile(t, tg, "a.txt", "saved")
		wantFile(t, tg, "hard.txt", "fresh")
		wantGone(t, tg, "del.txt")
		wantGone(t, tg, "other.txt")
		if s, err := tg.readlink("sl"); err != nil || s != "a.txt" {
			t.Errorf("readlink sl = %q, %v", s, err)
		}
		if a, err := tg.stat("new.txt"); err != nil || a.Nlink != 2 {
			t.Errorf("new.txt: nlink %d, %v; want 2", a.Nlink, err)
		}
		if a, err := tg.stat("a.txt"); err != nil || a.Ino != inoOf(lowerA) {
			t.Errorf("a.txt: ino %d, %v; want the lower's %d", a.Ino, err, inoOf(lowerA))
		}
	}
	t.Run("rollback", func(t *testing.T) {
		must(t, w.Restore(saved))
		check(t, w)
		wantDisk(t, filepath.Join(saved, savedUpper, "a.txt"), "saved")
	})
	t.Run("clone", func(t *testing.T) {
		w2 := openWorld(t, lower, Overlay)
		must(t, w2.Restore(saved))
		check(t, w2)
		// Its own copy: a change of one world is not the other's.
		must(t, nodes(t, w2).write("a.txt", "clone's"))
		wantFile(t, tg, "a.txt", "saved")
		// The bases came along: a lower changed since conflicts.
		must(t, os.WriteFile(filepath.Join(lower, "a.txt"), []byte("upstream"), 0o640))
		var ce *ConflictError
		if err := w2.Apply(false); !errors.As(err, &ce) {
			t.Errorf("apply over a changed lower: %v, want a conflict", err)
		}
	})
}

func inoOf(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
