package ctl

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadTail: the last n bytes of a regular file; a missing file is
// empty; a FIFO or a symlink a hostile VMM put in its run directory is
// refused at once (not waited on, not followed).
func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "log")
	if err := os.WriteFile(f, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadTail(f, 4); err != nil || string(b) != "6789" {
		t.Errorf("ReadTail(4) = %q, %v", b, err)
	}
	if b, err := ReadTail(filepath.Join(dir, "none"), 4); err != nil || len(b) != 0 {
		t.Errorf("missing file: %q, %v", b, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTail(fifo, 4); err == nil {
		t.Error("a FIFO was read")
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTail(link, 4); err == nil {
		t.Error("a symlink was followed")
	}
}
