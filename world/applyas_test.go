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
