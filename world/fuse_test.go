package world

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFUSEPOSIX: through the FUSE mount, the operations tools use beyond
// TestPOSIX's: a directory renamed with a file open and looked up under
// it (the moved inodes follow), an editor's save over a lower file,
// RENAME_NOREPLACE, utimes, chown, fsync, statfs, a symbolic link the
// kernel follows inside the mount, readdir's file types.
func TestFUSEPOSIX(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	o := mountFUSE(t, w)
	must(t, os.MkdirAll(o.p("x/y"), 0o755))
	must(t, os.WriteFile(o.p("x/y/f"), []byte("1"), 0o644))
	f, err := os.Open(o.p("x/y/f"))
	must(t, err)
	defer f.Close()
	var before, after unix.Stat_t
	must(t, unix.Stat(o.p("x/y/f"), &before))
	must(t, os.Rename(o.p("x"), o.p("x2")))
	must(t, unix.Stat(o.p("x2/y/f"), &after))
	if before.Ino != after.Ino {
		t.Errorf("x/y/f moved to x2/y/f: inode %d, then %d", before.Ino, after.Ino)
	}
	wantFile(t, o, "x2/y/f", "1")
	must(t, os.WriteFile(o.p("x2/y/f"), []byte("2"), 0o644))
	wantFile(t, o, "x2/y/f", "2")
	b := make([]byte, 4)
	if n, err := f.ReadAt(b, 0); string(b[:n]) != "2" {
		t.Errorf("the file opened before the rename reads %q, %v; want 2", b[:n], err)
	}
	wantGone(t, o, "x")
	if names, err := o.list("x2/y"); err != nil || len(names) != 1 || names[0] != "f" {
		t.Errorf("x2/y lists %v, %v", names, err)
	}

	must(t, os.WriteFile(o.p("a.txt.tmp"), []byte("saved"), 0o640))
	must(t, os.Rename(o.p("a.txt.tmp"), o.p("a.txt")))
	wantFile(t, o, "a.txt", "saved")
	wantDisk(t, filepath.Join(lower, "a.txt"), "alpha")
	if err := unix.Renameat2(unix.AT_FDCWD, o.p("x2/y/f"), unix.AT_FDCWD, o.p("a.txt"), unix.RENAME_NOREPLACE); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("RENAME_NOREPLACE over a file: %v, want EEXIST", err)
	}

	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(o.p("a.txt"), when, when))
	if fi, err := os.Stat(o.p("a.txt")); err != nil || !fi.ModTime().Equal(when) {
		t.Errorf("mtime after utimes: %v, %v; want %v", fi.ModTime(), err, when)
	}
	if os.Geteuid() == 0 {
		must(t, os.Lchown(o.p("a.txt"), 4001, 4002))
		var st unix.Stat_t
		must(t, unix.Lstat(o.p("a.txt"), &st))
		if st.Uid != 4001 || st.Gid != 4002 {
			t.Errorf("owner after chown: %d:%d", st.Uid, st.Gid)
		}
	}
	g, err := os.OpenFile(o.p("x2/y/f"), os.O_WRONLY, 0)
	must(t, err)
	must(t, g.Sync())
	g.Close()
	var sfs unix.Statfs_t
	must(t, unix.Statfs(o.dir, &sfs))

	// Hard links: one inode, one number, through FUSE too, while the
	// kernel knows the inode (held open here: an inode it forgets, as
	// under memory pressure, gets a new number at its next lookup).
	held, err := os.Open(o.p("a.txt"))
	must(t, err)
	defer held.Close()
	must(t, os.Link(o.p("a.txt"), o.p("hard")))
	var s1, s2 unix.Stat_t
	must(t, unix.Stat(o.p("a.txt"), &s1))
	must(t, unix.Stat(o.p("hard"), &s2))
	if s1.Ino != s2.Ino || s2.Nlink != 2 {
		t.Errorf("a.txt and its link hard: inodes %d and %d, nlink %d; want one inode, nlink 2", s1.Ino, s2.Ino, s2.Nlink)
	}
	must(t, os.WriteFile(o.p("hard"), []byte("linked"), 0o644))
	wantFile(t, o, "a.txt", "linked")

	must(t, os.Symlink("dir/b.txt", o.p("sl")))
	wantFile(t, o, "sl", "beta")
	ents, err := os.ReadDir(o.dir)
	must(t, err)
	for _, e := range ents {
		if (e.Name() == "link" || e.Name() == "sl") != (e.Type()&os.ModeSymlink != 0) {
			t.Errorf("readdir: %s has type %v", e.Name(), e.Type())
		}
	}
}
