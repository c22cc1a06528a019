package ctlfs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"sandfs/fs/client"
)

// TestFSClientOps: fs/client's Mkdir, StatAttr, Rename and Remove on a
// sandbox's fs/ over 9P (the E2B adapter's file operations), checked in
// the agent's real directory; a rename out of fs/ is EXDEV.
func TestFSClientOps(t *testing.T) {
	e := newGuestEnv(t, false)
	a := e.newSandbox(t, "t")
	c := e.client(t)
	if err := c.Mkdir("sandboxes/t/fs/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir("sandboxes/t/fs/d", 0o750); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("second Mkdir = %v; want EEXIST", err)
	}
	if _, err := c.CopyTo(bytes.NewReader([]byte("abc")), client.Remote{ID: "t", Path: "/d/f"}, "", 0o640); err != nil {
		t.Fatal(err)
	}
	at, err := c.StatAttr("sandboxes/t/fs/d/f")
	if err != nil || at.Size != 3 || at.Perm() != 0o640 || at.Dir() || at.MTime.IsZero() {
		t.Errorf("StatAttr(d/f) = %+v, %v", at, err)
	}
	if ad, err := c.StatAttr("sandboxes/t/fs/d"); err != nil || !ad.Dir() {
		t.Errorf("StatAttr(d) = %+v, %v; want a directory", ad, err)
	}
	if err := c.Rename("sandboxes/t/fs/d/f", "sandboxes/t/fs/g"); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(a.root, "g")); err != nil || string(b) != "abc" {
		t.Errorf("guest g after rename = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(a.root, "d", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d/f still there after rename: %v", err)
	}
	if err := c.Rename("sandboxes/t/fs/nosuch", "sandboxes/t/fs/x"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Rename(nosuch) = %v; want ENOENT", err)
	}
	if err := c.Rename("sandboxes/t/fs/g", "sandboxes/t/procs/g"); !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) {
		t.Errorf("Rename into procs/ = %v; want EXDEV or EPERM", err)
	}
	if err := c.Remove("sandboxes/t/fs/d", true); err != nil {
		t.Errorf("Remove(d, dir) = %v", err)
	}
	if err := c.Remove("sandboxes/t/fs/g", false); err != nil {
		t.Errorf("Remove(g) = %v", err)
	}
	if ents, _ := os.ReadDir(a.root); len(ents) != 0 {
		t.Errorf("guest root after removes: %v; want empty", ents)
	}
}
