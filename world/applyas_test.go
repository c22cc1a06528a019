package world

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	"sandfs/test/testenv"
)

// TestApplyAsOwner: applied as its owner, a world writes only where the
// owner could: root's files in root's directories stay as they are (the
// kernel refuses: EACCES), the owner's directory gets the change, owned
// by them; applied as root, the same change lands.
func TestApplyAsOwner(t *testing.T) {
	testenv.NeedRoot(t)
	lower := newLower(t)
	must(t, os.Chmod(lower, 0o755))
	mine := filepath.Join(lower, "mine")
	must(t, os.Mkdir(mine, 0o755))
	must(t, os.Chown(mine, 4001, 4001))
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	alice := cred.Cred{UID: 4001, GID: 4001}

	for _, change := range []func() error{
		func() error { return tg.write("a.txt", "alice was here") },
		func() error { return tg.remove("del.txt") },
		func() error { return tg.write("dir/new.txt", "new") },
		func() error { return tg.mkdir("d2") },
	} {
		must(t, change())
		want := diffText(t, w)
		if err := w.ApplyAs(false, alice); !errors.Is(err, syscall.EACCES) {
			t.Errorf("alice applying %q: %v, want EACCES", want, err)
		}
		if got := diffText(t, w); got != want {
			t.Errorf("after a refused apply, diff %q; want %q", got, want)
		}
		must(t, w.Discard())
	}
	wantDisk(t, filepath.Join(lower, "a.txt"), "alpha")
	wantDisk(t, filepath.Join(lower, "del.txt"), "x")
	for _, p := range []string{"dir/new.txt", "d2"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); !os.IsNotExist(err) {
			t.Errorf("%s in the lower after a refused apply: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(lower); len(ents) != 5 {
		t.Errorf("the lower after refused applies: %d entries, want 5 (no leftovers)", len(ents))
	}

	must(t, tg.write("mine/new.txt", "ok"))
	must(t, w.ApplyAs(false, alice))
	wantDisk(t, filepath.Join(mine, "new.txt"), "ok")
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(mine, "new.txt"), &st))
	if st.Uid != 4001 || st.Gid != 4001 {
		t.Errorf("mine/new.txt applied by alice: owner %d:%d", st.Uid, st.Gid)
	}

	must(t, tg.write("a.txt", "root's"))
	must(t, w.ApplyAs(false, cred.Cred{}))
	wantDisk(t, filepath.Join(lower, "a.txt"), "root's")
	// The daemon's own threads kept root's credentials.
	must(t, os.WriteFile(filepath.Join(lower, "after"), nil, 0o600))
}

// TestUnsafeRWAsOwner: an unsafe-rw world whose writer is its owner
// (WriteAs) changes the lower only where the owner could: writing,
// creating, removing, renaming, linking or chmod-ing root's files in
// root's directories is refused by the kernel and changes nothing; in
// the owner's directory the changes land, the owner's; reads of what
// the owner may not write still work.
func TestUnsafeRWAsOwner(t *testing.T) {
	testenv.NeedRoot(t)
	lower := newLower(t)
	must(t, os.Chmod(lower, 0o755))
	must(t, os.Chmod(filepath.Join(lower, "a.txt"), 0o644))
	mine := filepath.Join(lower, "mine")
	must(t, os.Mkdir(mine, 0o755))
	must(t, os.Chown(mine, 4001, 4001))
	w := openWorld(t, lower, UnsafeRW)
	must(t, w.WriteAs(cred.Cred{UID: 4001, GID: 4001}))
	tg := nodes(t, w)

	for name, change := range map[string]func() error{
		"write a.txt":      func() error { return tg.write("a.txt", "alice was here") },
		"create dir/n.txt": func() error { return tg.write("dir/n.txt", "new") },
		"remove del.txt":   func() error { return tg.remove("del.txt") },
		"mkdir d2":         func() error { return tg.mkdir("d2") },
		"rename a.txt":     func() error { return tg.rename("a.txt", "mine/a.txt") },
		"link a.txt":       func() error { return tg.link("a.txt", "a2.txt") },
		"symlink s":        func() error { return tg.symlink("a.txt", "s") },
		"chmod a.txt":      func() error { return tg.chmod("a.txt", 0o666) },
	} {
		err := change()
		if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
			t.Errorf("%s as alice: %v, want EACCES or EPERM", name, err)
		}
	}
	wantDisk(t, filepath.Join(lower, "a.txt"), "alpha")
	wantDisk(t, filepath.Join(lower, "del.txt"), "x")
	if fi, err := os.Stat(filepath.Join(lower, "a.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a.txt after a refused chmod: %v, %v", fi.Mode(), err)
	}
	for _, p := range []string{"dir/n.txt", "d2", "a2.txt", "s", "mine/a.txt"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); !os.IsNotExist(err) {
			t.Errorf("%s in the lower after a refused change: %v", p, err)
		}
	}
	if s, err := tg.read("a.txt"); err != nil || s != "alpha" {
		t.Errorf("read a.txt = %q, %v", s, err)
	}

	must(t, tg.write("mine/new.txt", "ok"))
	must(t, tg.mkdir("mine/sub"))
	must(t, tg.rename("mine/new.txt", "mine/sub/new.txt"))
	wantDisk(t, filepath.Join(mine, "sub/new.txt"), "ok")
	for _, p := range []string{"sub", "sub/new.txt"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(mine, p), &st))
		if st.Uid != 4001 || st.Gid != 4001 {
			t.Errorf("mine/%s made by alice's world: owner %d:%d", p, st.Uid, st.Gid)
		}
	}
	// The daemon's own threads kept root's credentials.
	must(t, os.WriteFile(filepath.Join(lower, "after"), nil, 0o600))
}
