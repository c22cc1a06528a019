package fusefs

import (
	iofs "io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	sfs "sandfs/fs"
	"sandfs/test/testenv"
)

// TestLookupServesWhatItFound: a lookup that finds a new node where the
// kernel still holds the inode of the old one (a sandbox removed and
// made again under its id while a shell sits in its directory) serves
// the new node: go-fuse keeps the inode it had for the number, and that
// inode must not go on serving the old node.
func TestLookupServesWhatItFound(t *testing.T) {
	testenv.NeedFUSE(t)
	gen := func(name string) sfs.Dir {
		return sfs.Table[struct{}]{{Name: name, Mode: iofs.ModeDir | 0o555, New: func(struct{}, iofs.FileMode) sfs.Node {
			return sfs.EmptyDir{Mode: 0o555}
		}}}.Dir(struct{}{}, 0o555, nil)
	}
	var cur atomic.Pointer[sfs.Dir]
	a := gen("a")
	cur.Store(&a)
	root := sfs.Table[struct{}]{{Name: "x", Mode: iofs.ModeDir | 0o555, New: func(struct{}, iofs.FileMode) sfs.Node {
		return *cur.Load()
	}}}.Dir(struct{}{}, 0o555, nil)
	dir := t.TempDir()
	m, err := New(dir, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })

	list := func() []string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(dir, "x"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	if got := list(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("x lists %v; want [a]", got)
	}
	held, err := os.Open(filepath.Join(dir, "x")) // the kernel keeps x's inode
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	b := gen("b")
	cur.Store(&b)
	if got := list(); len(got) != 1 || got[0] != "b" {
		t.Errorf("x, made again, lists %v; want [b]", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "x", "b")); err != nil {
		t.Errorf("x/b: %v", err)
	}
}
