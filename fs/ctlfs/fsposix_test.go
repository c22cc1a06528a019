package ctlfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFSPOSIXFUSE: chmod, chown, utimes and rename on a sandbox's fs/
// through the FUSE mount reach the agent's real files, and so do link
// and symlink (Tlink, Tsymlink).
func TestFSPOSIXFUSE(t *testing.T) {
	e := newGuestEnv(t, true)
	a := e.newSandbox(t, "t")
	fsDir := filepath.Join(e.mnt, "sandboxes/t/fs")
	if err := os.WriteFile(filepath.Join(fsDir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(fsDir, "f"), 0o600); err != nil {
		t.Fatalf("chmod: %v", err)
	}
	when := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(fsDir, "f"), when, when); err != nil {
		t.Fatalf("utimes: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(filepath.Join(fsDir, "f"), 4001, 4002); err != nil {
			t.Fatalf("chown: %v", err)
		}
	}
	if err := os.Rename(filepath.Join(fsDir, "f"), filepath.Join(fsDir, "g")); err != nil {
		t.Fatalf("rename: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(a.root, "g"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || time.Unix(st.Mtim.Unix()).UTC() != when {
		t.Errorf("the agent's g: mode %o mtime %v; want 600, %v", st.Mode&0o7777, time.Unix(st.Mtim.Unix()).UTC(), when)
	}
	if os.Geteuid() == 0 && (st.Uid != 4001 || st.Gid != 4002) {
		t.Errorf("the agent's g: owner %d:%d; want 4001:4002", st.Uid, st.Gid)
	}
	if err := os.Link(filepath.Join(fsDir, "g"), filepath.Join(fsDir, "h")); err != nil {
		t.Errorf("link through the bind: %v", err)
	}
	var hs syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(a.root, "h"), &hs); err != nil || hs.Ino != st.Ino || hs.Nlink != 2 {
		t.Errorf("the agent's h: %v, inode %d (g's %d), nlink %d; want g's inode, nlink 2", err, hs.Ino, st.Ino, hs.Nlink)
	}
	if err := os.Symlink("g", filepath.Join(fsDir, "s")); err != nil {
		t.Errorf("symlink through the bind: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(a.root, "s")); err != nil || l != "g" {
		t.Errorf("the agent's s: %q, %v; want a link to g", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(fsDir, "s")); err != nil || string(b) != "x" {
		t.Errorf("s through the bind reads %q, %v", b, err)
	}
	if err := os.Symlink("g", filepath.Join(fsDir, "s")); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("symlink over s: %v; want EEXIST", err)
	}
	if err := os.Link(fsDir, filepath.Join(fsDir, "dirlink")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("link of a directory: %v; want EPERM", err)
	}
}
