package vmm

import (
	"bytes"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"sandfs/snapshot"
)

// TestDeltaOverAncestor: a delta over an ancestor of the machine's last
// snapshot holds the pages of the snapshots between and those dirtied
// since (a fold), restores the same memory as the whole chain, and a
// parent outside the chain is refused with EINVAL.
func TestDeltaOverAncestor(t *testing.T) {
	const size = 1 << 20
	store := t.TempDir()
	mem := make([]byte, size)
	n := uint64(size / pageSize)
	write := func(id string, parent *snapshot.Snapshot, pages ...uint64) *snapshot.Snapshot {
		t.Helper()
		set := snapshot.NewPages(n)
		for _, p := range pages {
			mem[p*pageSize] = byte(p) + byte(len(id))
			set.Set(p)
		}
		s, err := snapshot.Write(filepath.Join(store, id), mem, set, parent, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other := write("o", nil, 0) // a writes page 0 again
	a := write("a", nil, 0, 1, 2)
	b := write("b", a, 5)
	c := write("_pause-1", b, 7, 8)

	dirty := snapshot.NewPages(n)
	mem[9*pageSize] = 99
	dirty.Set(9)
	r := &guestRAM{mem: mem, size: size, dirty: dirty, base: c}

	over, pages, err := r.deltaOver(filepath.Join(store, "b"))
	if err != nil || over == nil || over.ID != "b" {
		t.Fatalf("deltaOver(b) = %v, %v; want b", over, err)
	}
	for _, p := range []uint64{7, 8, 9} {
		if !pages.Has(p) {
			t.Errorf("fold over b lacks page %d", p)
		}
	}
	if pages.Count() != 3 {
		t.Errorf("fold over b holds %d pages; want 3 (7, 8, 9)", pages.Count())
	}
	f, err := snapshot.Write(filepath.Join(store, "f"), mem, pages, over, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	chain, err := snapshot.Chain(f.Dir)
	if err != nil || len(chain) != 3 {
		t.Fatalf("chain of the fold: %d, %v; want a, b, f", len(chain), err)
	}
	mp, err := snapshot.Map(chain)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Unmap()
	if !bytes.Equal(mp.Mem, mem) {
		t.Errorf("the fold over b restores other memory than the machine's")
	}

	if over, pages, err := r.deltaOver(c.Dir); err != nil || over.ID != c.ID || pages.Count() != 1 {
		t.Errorf("deltaOver(last) = %v, %d pages, %v; want it, the dirty page", over, pages.Count(), err)
	}
	for _, bad := range []string{other.Dir, filepath.Join(store, "nosuch")} {
		if _, _, err := r.deltaOver(bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("deltaOver(%s) = %v; want EINVAL", filepath.Base(bad), err)
		}
	}
	if over, _, err := r.deltaOver(""); err != nil || over != nil {
		t.Errorf("deltaOver(\"\") = %v, %v; want full", over, err)
	}
}
