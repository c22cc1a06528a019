package vmm

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	r := &guestRAM{mem: mem, size: size, dirty: dirty, base: c, shape: snapshot.ShapeOf([]*snapshot.Snapshot{a, b, c})}

	over, pages, shape, err := r.deltaOver(filepath.Join(store, "b"))
	if err != nil || over == nil || over.ID != "b" {
		t.Fatalf("deltaOver(b) = %v, %v; want b", over, err)
	}
	if want := snapshot.ShapeOf([]*snapshot.Snapshot{a, b}); !slices.Equal(shape, want) {
		t.Errorf("deltaOver(b)'s chain shape %v; want a's and b's, %v", shape, want)
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

	if over, pages, shape, err := r.deltaOver(c.Dir); err != nil || over.ID != c.ID || over.Sum != c.Sum || pages.Count() != 1 || !slices.Equal(shape, r.shape) {
		t.Errorf("deltaOver(last) = %v, %d pages, shape %v, %v; want it, the dirty page, the machine's shape", over, pages.Count(), shape, err)
	}
	for _, bad := range []string{other.Dir, filepath.Join(store, "nosuch")} {
		if _, _, _, err := r.deltaOver(bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("deltaOver(%s) = %v; want EINVAL", filepath.Base(bad), err)
		}
	}
	if over, _, _, err := r.deltaOver(""); err != nil || over != nil {
		t.Errorf("deltaOver(\"\") = %v, %v; want full", over, err)
	}
}

// TestDeltaOverLast: a delta over the machine's last snapshot reads only
// that snapshot again: it must still be the one the machine wrote (else
// EINVAL, or the error of a missing one), and the chain's shape the
// machine keeps decides compaction.
func TestDeltaOverLast(t *testing.T) {
	const size = 1 << 20
	store := t.TempDir()
	mem := make([]byte, size)
	n := uint64(size / pageSize)
	all := snapshot.NewPages(n)
	all.SetRange(0, 4)
	a, err := snapshot.Write(filepath.Join(store, "a"), mem, all, nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	dirty := snapshot.NewPages(n)
	dirty.Set(3)
	r := &guestRAM{mem: mem, size: size, dirty: dirty, base: a, shape: snapshot.ShapeOf([]*snapshot.Snapshot{a})}
	if over, pages, _, err := r.deltaOver(a.Dir); err != nil || over == nil || over.Sum != a.Sum || pages.Count() != 1 {
		t.Fatalf("deltaOver(a) = %v, %v; want a delta over a", over, err)
	}
	// The chain's depth at CompactDepth: written full instead.
	deepShape := make(snapshot.Shape, snapshot.CompactDepth)
	deepShape[len(deepShape)-1].ID = a.ID
	deep := &guestRAM{mem: mem, size: size, dirty: dirty, base: a, shape: deepShape}
	if over, pages, _, err := deep.deltaOver(a.Dir); err != nil || over != nil || pages.Count() != 1 {
		t.Errorf("deltaOver over a chain of %d = %v, %v; want full", snapshot.CompactDepth, over, err)
	}
	// A delta over it whose parent left the store: refused.
	d, err := snapshot.Write(filepath.Join(store, "d"), mem, dirty, a, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	rd := &guestRAM{mem: mem, size: size, dirty: dirty, base: d, shape: snapshot.ShapeOf([]*snapshot.Snapshot{a, d})}
	if over, _, _, err := rd.deltaOver(d.Dir); err != nil || over == nil || over.ID != "d" {
		t.Fatalf("deltaOver(d) = %v, %v; want a delta over d", over, err)
	}
	if err := os.Rename(a.Dir, a.Dir+".gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := rd.deltaOver(d.Dir); !errors.Is(err, snapshot.ErrNotExist) {
		t.Errorf("deltaOver(d) without a = %v; want ErrNotExist", err)
	}
	if err := os.Rename(a.Dir+".gone", a.Dir); err != nil {
		t.Fatal(err)
	}
	// Another snapshot of the same name in its place: refused.
	if err := os.RemoveAll(a.Dir); err != nil {
		t.Fatal(err)
	}
	mem[0] = 1
	if _, err := snapshot.Write(a.Dir, mem, all, nil, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := r.deltaOver(a.Dir); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("deltaOver(a replaced) = %v; want EINVAL", err)
	}
	if err := os.RemoveAll(a.Dir); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := r.deltaOver(a.Dir); !errors.Is(err, snapshot.ErrNotExist) {
		t.Errorf("deltaOver(a removed) = %v; want ErrNotExist", err)
	}
}
