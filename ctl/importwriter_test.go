package ctl

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestImportFileWriters: a hostile VMM keeps the file it wrote open for
// writing (or puts a FIFO in its place). Importing it must be refused:
// through the kept fd the snapshot, root's and read-only once linked out,
// would still change under every restore of it. A FIFO must not hang.
func TestImportFileWriters(t *testing.T) {
	work, out := t.TempDir(), t.TempDir()
	w, err := os.OpenFile(filepath.Join(work, "mem"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := importFile(work, "mem", filepath.Join(out, "mem"), 0, false); err == nil {
		w.WriteString("changed after the import")
		t.Fatalf("importFile of a file open for writing = nil; want refused")
	}
	// A writable shared mapping left after its fd is closed.
	if err := w.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(w.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := importFile(work, "mem", filepath.Join(out, "mem"), 0, false); err == nil {
		t.Errorf("importFile of a file with a shared writable mapping = nil; want refused")
	}
	unix.Munmap(mem)
	if err := importFile(work, "mem", filepath.Join(out, "mem"), 0, false); err != nil {
		t.Errorf("importFile once nobody writes = %v", err)
	}
	if err := unix.Mkfifo(filepath.Join(work, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := importFile(work, "fifo", filepath.Join(out, "fifo"), 0, false); err == nil {
		t.Errorf("importFile of a FIFO = nil; want refused")
	}
}
