package world

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// read reads the file n whole.
func read(t *testing.T, n sfs.Node) string {
	t.Helper()
	h, err := sfs.Open(bg, n, sfs.ReadOnly)
	must(t, err)
	defer h.Close()
	buf := make([]byte, 64)
	k, err := h.Read(bg, buf, 0)
	if err != nil && k == 0 {
		t.Fatal(err)
	}
	return string(buf[:k])
}

// walker returns w's root and a walk from it that must succeed.
func walker(t *testing.T, w *World) (sfs.Dir, func(string) sfs.Node) {
	root, err := w.Root()
	must(t, err)
	return root, func(p string) sfs.Node {
		t.Helper()
		n, err := sfs.Walk(bg, root, p)
		must(t, err)
		return n
	}
}

// TestNodeSeesChanges: a node found once (a 9P fid, a FUSE inode) states
// what its path is at each use, whether the change came through the
// world (copy-up, chmod, remove) or, for the lower, from outside it (the
// file written in place, replaced by another file or a pipe); while the upper's names
// stay as they were it states only its own entry (World.current), and
// must not show what it saw before.
func TestNodeSeesChanges(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	root, walk := walker(t, w)
	size := func(n sfs.Node) int64 {
		t.Helper()
		a, err := n.Stat(bg)
		must(t, err)
		return a.Size
	}
	f := walk("dir/b.txt")
	if got := size(f); got != 4 { // the lookup's own attributes
		t.Fatalf("size %d; want 4", got)
	}
	must(t, os.WriteFile(filepath.Join(lower, "dir/b.txt"), []byte("beta2"), 0o640))
	if got := size(f); got != 5 {
		t.Errorf("after the lower's file was written in place: size %d; want 5", got)
	}
	tmp := filepath.Join(lower, "dir/new")
	must(t, os.WriteFile(tmp, []byte("replaced"), 0o640))
	must(t, os.Rename(tmp, filepath.Join(lower, "dir/b.txt")))
	if got := size(f); got != 8 {
		t.Errorf("after the lower's file was replaced: size %d; want 8", got)
	}
	g := walk("a.txt")
	size(g)
	must(t, os.Remove(filepath.Join(lower, "a.txt")))
	must(t, os.WriteFile(filepath.Join(lower, "a.txt"), []byte("another"), 0o640))
	if got := read(t, g); got != "another" {
		t.Errorf("opened after the lower's file was replaced: %q; want %q", got, "another")
	}
	must(t, os.Remove(filepath.Join(lower, "a.txt")))
	must(t, unix.Mkfifo(filepath.Join(lower, "a.txt"), 0o640))
	if h, err := sfs.Open(bg, g, sfs.ReadOnly); err != nil { // a writer-less pipe: not held
		t.Errorf("opened after a pipe took the file's place: %v", err)
	} else {
		h.Close()
	}
	h, err := sfs.Open(bg, walk("dir/b.txt"), sfs.WriteOnly)
	must(t, err)
	_, err = h.Write(bg, []byte("copied up and longer"), 0)
	must(t, err)
	h.Close()
	if got := size(f); got != 20 {
		t.Errorf("after a copy-up through another node: size %d; want 20", got)
	}
	d := walk("dir")
	mode := fs.FileMode(0o701) | fs.ModeDir
	must(t, d.(sfs.Setattrer).SetAttr(bg, sfs.Change{Mode: &mode}))
	if a, err := d.Stat(bg); err != nil || a.Mode.Perm() != 0o701 {
		t.Errorf("dir after chmod: %v, %v; want 0701", a.Mode, err)
	}
	if a, err := walk("").Stat(bg); err != nil || !a.Mode.IsDir() {
		t.Fatalf("root: %v, %v", a.Mode, err)
	}
	rmode := fs.FileMode(0o750) | fs.ModeDir
	must(t, root.(sfs.Setattrer).SetAttr(bg, sfs.Change{Mode: &rmode}))
	if a, err := root.Stat(bg); err != nil || a.Mode.Perm() != 0o750 {
		t.Errorf("root after chmod: %v, %v; want 0750", a.Mode, err)
	}
	must(t, d.(sfs.Remover).Remove(bg, "b.txt", false))
	if _, err := f.Stat(bg); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("after its removal: %v; want ENOENT", err)
	}
	c := walk("dir/sub/c.txt")
	size(c)
	must(t, os.Remove(filepath.Join(lower, "dir/sub/c.txt")))
	if _, err := c.Stat(bg); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("after its removal from the lower: %v; want ENOENT", err)
	}
}

// TestNodeAfterItsDirectoryChanged: a node and the directories resolved
// on its way (World.dirs) show what is there while changes go on beside
// them (a sibling copied up, a file created), and after a change of a
// directory above: a rename, a removal, a directory made again over a
// whiteout (opaque). (That a change above touches a path is
// TestChangeLogTouches's: here a node's own entry, gone from its layer,
// sends it back to a resolution too.)
func TestNodeAfterItsDirectoryChanged(t *testing.T) {
	lower := newLower(t)
	must(t, os.WriteFile(filepath.Join(lower, "dir/sub/d.txt"), []byte("delta"), 0o640))
	w := openWorld(t, lower, Overlay)
	root, walk := walker(t, w)
	c := walk("dir/sub/c.txt")
	c.Stat(bg) // the lookup's own attributes: later ones are stated
	if got := read(t, c); got != "gamma" {
		t.Fatalf("read %q", got)
	}
	h, err := sfs.Open(bg, walk("dir/b.txt"), sfs.WriteOnly) // copies dir up
	must(t, err)
	h.Close()
	sub := walk("dir/sub")
	_, nh, err := sub.(sfs.Creator).Create(bg, "new.txt", sfs.WriteOnly, 0o640)
	must(t, err)
	nh.Close()
	h, err = sfs.Open(bg, walk("dir/sub/d.txt"), sfs.WriteOnly) // a sibling copied up
	must(t, err)
	_, err = h.Write(bg, []byte("DELTA"), 0)
	must(t, err)
	h.Close()
	if got := read(t, c); got != "gamma" {
		t.Errorf("after changes beside it: %q; want gamma", got)
	}
	if got := read(t, walk("dir/sub/d.txt")); got != "DELTA" {
		t.Errorf("the sibling copied up: %q; want DELTA", got)
	}
	dir := walk("dir")
	_, err = dir.(sfs.Mkdirer).Mkdir(bg, "mine", 0o750) // the world's own: a rename moves it
	must(t, err)
	_, mh, err := walk("dir/mine").(sfs.Creator).Create(bg, "f", sfs.WriteOnly, 0o640)
	must(t, err)
	_, err = mh.Write(bg, []byte("mine"), 0)
	must(t, err)
	mh.Close()
	m := walk("dir/mine/f")
	m.Stat(bg)
	if got := read(t, m); got != "mine" {
		t.Fatalf("read %q", got)
	}
	must(t, dir.(sfs.Renamer).Rename(bg, "mine", dir, "mine2"))
	if _, err := m.Stat(bg); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("after its directory's rename: %v; want ENOENT", err)
	}
	if _, err := sfs.Walk(bg, root, "dir/mine/f"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("walk to the old path: %v; want ENOENT", err)
	}
	if got := read(t, walk("dir/mine2/f")); got != "mine" {
		t.Errorf("at the new path: %q; want mine", got)
	}
	for _, name := range []string{"c.txt", "d.txt", "new.txt"} {
		must(t, sub.(sfs.Remover).Remove(bg, name, false))
	}
	must(t, dir.(sfs.Remover).Remove(bg, "sub", true))
	if _, err := c.Stat(bg); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("after its directory's removal: %v; want ENOENT", err)
	}
	_, err = dir.(sfs.Mkdirer).Mkdir(bg, "sub", 0o750)
	must(t, err)
	if _, err := c.Stat(bg); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("in the directory made again (opaque): %v; want ENOENT", err)
	}
	ents, err := walk("dir/sub").(sfs.Dir).List(bg)
	if err != nil || len(ents) != 0 {
		t.Errorf("the directory made again lists %v, %v; want nothing", ents, err)
	}
}

// TestCopyUpDirNow: a directory copied up takes the lower's attributes
// as they are at the copy-up, even when its resolution was cached
// (World.dirs) before the lower changed from outside.
func TestCopyUpDirNow(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	_, walk := walker(t, w)
	d := walk("dir")
	w.layers.RLock()
	_, err := w.resolve("dir/b.txt") // caches dir's resolution
	w.layers.RUnlock()
	must(t, err)
	must(t, os.Chmod(filepath.Join(lower, "dir"), 0o711))
	_, h, err := d.(sfs.Creator).Create(bg, "new.txt", sfs.WriteOnly, 0o640)
	must(t, err)
	h.Close()
	st, err := os.Stat(filepath.Join(w.Upper(), "dir"))
	must(t, err)
	if st.Mode().Perm() != 0o711 {
		t.Errorf("dir copied up with mode %v; want the lower's now, 0711", st.Mode().Perm())
	}
}
