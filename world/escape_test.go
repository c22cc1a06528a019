package world

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	"sandfs/fs/ninep"
	"sandfs/test/testenv"
)

// TestEscape: symbolic links and ".." cannot reach outside the world,
// and failed attempts change nothing.
func TestEscape(t *testing.T) {
	lower := newLower(t)
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(lower, "esc")))
	must(t, os.Symlink("..", filepath.Join(lower, "up")))
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	for _, p := range []string{"esc/secret", "up/a.txt", "../a.txt", "up/../a.txt"} {
		if s, err := tg.read(p); err == nil {
			t.Errorf("read %s = %q, want an error", p, s)
		}
		if err := tg.write(p, "pwned"); err == nil {
			t.Errorf("write %s succeeded", p)
		}
	}
	if _, err := tg.read("esc"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("open of a link: %v, want ELOOP", err)
	}
	if err := tg.write("link", "through"); err == nil {
		t.Error("write through a link succeeded")
	}
	for _, name := range []string{"..", ".", "dir/b.txt", "", ".wh.a.txt"} {
		if n, err := tg.root.Lookup(bg, name); err == nil {
			t.Errorf("lookup %q = %v", name, n)
		}
	}
	d, err := tg.walk("dir")
	must(t, err)
	for _, name := range []string{"..", "../a.txt", "x/y"} {
		if err := d.(*Dir).Rename(bg, "b.txt", tg.root, name); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("rename to %q: %v, want EINVAL", name, err)
		}
	}
	// A lower directory swapped for a link after the world was made.
	must(t, os.Rename(filepath.Join(lower, "dir"), filepath.Join(lower, "dir.old")))
	must(t, os.Symlink(outside, filepath.Join(lower, "dir")))
	if s, err := tg.read("dir/secret"); err == nil {
		t.Errorf("read through a swapped dir = %q", s)
	}
	wantDisk(t, filepath.Join(outside, "secret"), "s")
	wantDisk(t, filepath.Join(lower, "a.txt"), "alpha")
	if d := diffText(t, w); d != "" {
		t.Errorf("diff after refused attempts: %q", d)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
}

// TestLowerLink: a lower path through a symbolic link is refused (the
// daemon resolves it once, when the world is made).
func TestLowerLink(t *testing.T) {
	lower := newLower(t)
	link := filepath.Join(t.TempDir(), "l")
	must(t, os.Symlink(lower, link))
	if w, err := Open(link, t.TempDir(), Overlay); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Open through a link: %v, want ELOOP", err)
		if w != nil {
			w.Close()
		}
	}
}

// TestCopyUpDoesNotBlock: while a large file is being copied up, other
// operations on the world go on.
func TestCopyUpDoesNotBlock(t *testing.T) {
	lower := newLower(t)
	big := make([]byte, 4*copyChunk+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(lower, "big.bin"), big, 0o600))
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	started, release := make(chan struct{}), make(chan struct{})
	first := true
	w.copyHook = func() {
		if first {
			first = false
			close(started)
			<-release
		}
	}
	done := make(chan error)
	go func() { done <- tg.chmod("big.bin", 0o640) }()
	<-started
	if d, total := w.Copying(); d != copyChunk || total != int64(len(big)) {
		t.Errorf("copying %d of %d, want %d of %d", d, total, copyChunk, len(big))
	}
	must(t, tg.write("other.txt", "meanwhile"))
	wantFile(t, tg, "a.txt", "alpha")
	must(t, tg.remove("del.txt"))
	if _, err := tg.list(""); err != nil {
		t.Error(err)
	}
	close(release)
	must(t, <-done)
	if d, total := w.Copying(); d != 0 || total != 0 {
		t.Errorf("after: copying %d of %d", d, total)
	}
	if c := w.Copied(); c.Files != 1 || c.Bytes != int64(len(big)) || c.Time <= 0 {
		t.Errorf("after: copied %+v, want 1 file of %d bytes", c, len(big))
	}
	wantDisk(t, filepath.Join(w.Upper(), "big.bin"), string(big))
}

// attachNinep serves w's union with the 9P server (showing owners
// through ids, nil: as they are) as this process, and returns the root
// of a p9 client's attach; both end with the test.
func attachNinep(t *testing.T, w *World, ids *ninep.IDMap) p9.File {
	t.Helper()
	root, err := w.Root()
	must(t, err)
	sc, cc := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := ninep.NewServer(root, nil)
	srv.SetIDMap(ids)
	go srv.ServeConnAs(ctx, sc, cred.Self())
	cl, err := ninep.NewClient(cc, 256<<10)
	must(t, err)
	t.Cleanup(func() { cl.Close() })
	r, err := cl.Attach("/")
	must(t, err)
	return r
}

// TestNinep: the union served by the 9P server, used by the p9 client.
func TestNinep(t *testing.T) {
	lower := newLower(t)
	w := openWorld(t, lower, Overlay)
	r := attachNinep(t, w, nil)
	_, f, err := r.Walk([]string{"dir", "b.txt"})
	must(t, err)
	_, _, err = f.Open(p9.ReadWrite)
	must(t, err)
	buf := make([]byte, 16)
	if n, err := f.ReadAt(buf, 0); string(buf[:n]) != "beta" {
		t.Errorf("read %q, %v", buf[:n], err)
	}
	_, err = f.WriteAt([]byte("BE"), 0)
	must(t, err)
	f.Close()
	_, d, err := r.Walk([]string{"dir"})
	must(t, err)
	must(t, d.UnlinkAt("b.txt", 0))
	wantDisk(t, filepath.Join(lower, "dir/b.txt"), "beta")
	if got, want := diffText(t, w), "deleted dir/b.txt"; got != want {
		t.Errorf("diff %q, want %q", got, want)
	}

	// A fid walked before a rename still names its file after it (the
	// kernel's 9p client opens a renamed file through such a fid).
	_, old, err := r.Walk([]string{"a.txt"})
	must(t, err)
	must(t, r.RenameAt("a.txt", d, "renamed.txt"))
	_, _, err = old.Open(p9.ReadOnly)
	must(t, err)
	if n, err := old.ReadAt(buf, 0); string(buf[:n]) != "alpha" {
		t.Errorf("read through the fid walked before the rename: %q, %v", buf[:n], err)
	}
}

// TestNinepIDMap: the union served with an IDMap, as a guest's /workspace
// is (ctl.attachWorld): the owner's files show as the guest user's,
// anyone else's as nobody; a create by the guest user is the owner's on
// disk, one by another guest uid the connection's; a chown to the guest
// user is a chown to the owner, and one to an unmapped uid is refused
// and changes nothing.
func TestNinepIDMap(t *testing.T) {
	testenv.NeedRoot(t)
	lower := newLower(t)
	must(t, os.Chown(filepath.Join(lower, "a.txt"), 4000, 4001))
	must(t, os.Chown(filepath.Join(lower, "del.txt"), 4242, 4242))
	w := openWorld(t, lower, Overlay)
	r := attachNinep(t, w, &ninep.IDMap{Host: cred.Owner{UID: 4000, GID: 4001}, Guest: cred.Owner{UID: 1000, GID: 1000}})
	owner := func(name string) (p9.UID, p9.GID) {
		t.Helper()
		_, f, err := r.Walk([]string{name})
		must(t, err)
		defer f.Close()
		_, _, a, err := f.GetAttr(p9.AttrMaskAll)
		must(t, err)
		return a.UID, a.GID
	}
	onDisk := func(name string) (uint32, uint32) {
		t.Helper()
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(w.Upper(), name), &st))
		return st.Uid, st.Gid
	}
	if u, g := owner("a.txt"); u != 1000 || g != 1000 {
		t.Errorf("the owner's file shows %d:%d, want 1000:1000", u, g)
	}
	if u, g := owner("del.txt"); u != ninep.Overflow || g != ninep.Overflow {
		t.Errorf("another's file shows %d:%d, want %d:%d", u, g, ninep.Overflow, ninep.Overflow)
	}

	_, d, err := r.Walk(nil)
	must(t, err)
	nf, _, _, err := d.Create("user.txt", p9.WriteOnly, 0o644, 1000, 1000)
	must(t, err)
	nf.Close()
	if u, g := onDisk("user.txt"); u != 4000 || g != 4001 {
		t.Errorf("the guest user's new file is %d:%d on disk, want the owner's 4000:4001", u, g)
	}
	if u, g := owner("user.txt"); u != 1000 || g != 1000 {
		t.Errorf("the guest user's new file shows %d:%d, want 1000:1000", u, g)
	}
	_, d, err = r.Walk(nil)
	must(t, err)
	nf, _, _, err = d.Create("root.txt", p9.WriteOnly, 0o644, 0, 0)
	must(t, err)
	nf.Close()
	if u, g := onDisk("root.txt"); u != 0 || g != 0 {
		t.Errorf("guest root's new file is %d:%d on disk, want the connection's 0:0", u, g)
	}

	_, f, err := r.Walk([]string{"root.txt"})
	must(t, err)
	must(t, f.SetAttr(p9.SetAttrMask{UID: true, GID: true}, p9.SetAttr{UID: 1000, GID: 1000}))
	if u, g := onDisk("root.txt"); u != 4000 || g != 4001 {
		t.Errorf("after chown to the guest user: %d:%d on disk, want the owner's 4000:4001", u, g)
	}
	if err := f.SetAttr(p9.SetAttrMask{UID: true, Size: true}, p9.SetAttr{UID: 0, Size: 1}); !errors.Is(err, linux.EPERM) {
		t.Errorf("chown to an unmapped uid = %v, want EPERM", err)
	}
	if err := f.SetAttr(p9.SetAttrMask{GID: true}, p9.SetAttr{GID: 7}); !errors.Is(err, linux.EPERM) {
		t.Errorf("chgrp to an unmapped gid = %v, want EPERM", err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(w.Upper(), "root.txt"), &st))
	if st.Uid != 4000 || st.Gid != 4001 || st.Size != 0 {
		t.Errorf("after the refused chowns: %d:%d size %d, want 4000:4001 size 0 (unchanged)", st.Uid, st.Gid, st.Size)
	}
	f.Close()
}
