package vmmproc

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

// TestCheckRestoreChain: a jailed VMM restores a delta only from inside
// its work directory (where the parents beside it are visible); from
// outside, a full snapshot only, and a delta is refused with EXDEV.
func TestCheckRestoreChain(t *testing.T) {
	base := t.TempDir()
	mem := make([]byte, 16*snapshot.PageSize)
	pages := snapshot.NewPages(16)
	pages.Set(3)
	write := func(store, id string, parent *snapshot.Snapshot) *snapshot.Snapshot {
		s, err := snapshot.Write(filepath.Join(base, store, id), mem, pages, parent, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, store := range []string{"work/snapshots", "store"} {
		if err := os.MkdirAll(filepath.Join(base, store), 0o700); err != nil {
			t.Fatal(err)
		}
		write(store, "s2", write(store, "s1", nil))
	}
	work := filepath.Join(base, "work")
	for _, tc := range []struct {
		restore string
		errno   syscall.Errno // 0: accepted
	}{
		{"", 0},
		{filepath.Join(work, "snapshots", "s1"), 0},
		{filepath.Join(work, "snapshots", "s2"), 0},
		{filepath.Join(base, "store", "s1"), 0},
		{filepath.Join(base, "store", "s2"), syscall.EXDEV},
		{filepath.Join(base, "store", "none"), syscall.ENOENT},
	} {
		err := checkRestoreChain(&Config{Restore: tc.restore, Jail: JailConfig{Work: work}})
		if msg.Errno(err) != tc.errno {
			t.Errorf("restore %s: %v (%v); want %v", tc.restore, err, msg.Errno(err), tc.errno)
		}
	}
}
