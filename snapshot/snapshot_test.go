package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testMem = 64 * PageSize

// ram returns testMem bytes where page p holds byte(p+seed) where set.
func ram(pages Pages, seed byte) []byte {
	m := make([]byte, testMem)
	for p := uint64(0); p < testMem/PageSize; p++ {
		if pages.Has(p) {
			for i := range PageSize {
				m[p*PageSize+uint64(i)] = byte(p) + seed
			}
		}
	}
	return m
}

func set(pages ...uint64) Pages {
	s := NewPages(testMem / PageSize)
	for _, p := range pages {
		s.Set(p)
	}
	return s
}

// chain3 writes base (pages 0-9), d1 (5-6 over it), d2 (9, 40) and d3
// (0, 63), each delta's pages written with a new seed, and returns the
// expected final RAM.
func chain3(t *testing.T, store string) []byte {
	t.Helper()
	want := ram(PagesOf([]Run{{Page: 0, Count: 10}}, 64), 1)
	base, err := Write(filepath.Join(store, "base"), want, PagesOf([]Run{{Page: 0, Count: 10}}, 64), nil, []byte("s0"))
	if err != nil {
		t.Fatal(err)
	}
	parent := base
	for i, d := range [][]uint64{{5, 6}, {9, 40}, {0, 63}} {
		pg := set(d...)
		mem := ram(pg, byte(10*(i+2)))
		for _, p := range d {
			copy(want[p*PageSize:(p+1)*PageSize], mem[p*PageSize:])
		}
		s, err := Write(filepath.Join(store, "d"+string(rune('1'+i))), mem, pg, parent, []byte("s"+string(rune('1'+i))))
		if err != nil {
			t.Fatal(err)
		}
		if s.DataBytes != uint64(len(d))*PageSize {
			t.Errorf("delta %d holds %d bytes, want %d", i+1, s.DataBytes, len(d)*PageSize)
		}
		parent = s
	}
	return want
}

func TestChainMap(t *testing.T) {
	store := t.TempDir()
	want := chain3(t, store)
	chain, err := Chain(filepath.Join(store, "d3"))
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 4 || chain[0].ID != "base" || string(chain[3].State) != "s3" {
		t.Fatalf("Chain(d3) = %d snapshots from %s; want 4 from base", len(chain), chain[0].ID)
	}
	mp, err := Map(chain)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Unmap()
	if !bytes.Equal(mp.Mem, want) {
		t.Errorf("mapped chain differs from the RAM it was taken of")
	}
	if mp.Maps != 1+1+2+2 {
		t.Errorf("Map made %d mappings; want 6 (5 and 6 are one run)", mp.Maps)
	}
	if got, want := mp.Pages.Count(), uint64(10+2); got != want {
		t.Errorf("chain holds %d pages; want %d", got, want)
	}
	// MAP_PRIVATE: writing the mapping leaves the files alone.
	mp.Mem[5*PageSize] = 0xee
	mp2, err := Map(chain)
	if err != nil {
		t.Fatal(err)
	}
	defer mp2.Unmap()
	if mp2.Mem[5*PageSize] != want[5*PageSize] {
		t.Errorf("a write into a mapping reached the snapshot file")
	}
	c, err := Compact(filepath.Join(store, "d3"), filepath.Join(store, "full"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Full() || string(c.State) != "s3" {
		t.Errorf("compacted snapshot: full %v state %q", c.Full(), c.State)
	}
	mp3, err := Map([]*Snapshot{c})
	if err != nil {
		t.Fatal(err)
	}
	defer mp3.Unmap()
	if !bytes.Equal(mp3.Mem, want) {
		t.Errorf("compacted snapshot differs from the chain")
	}
}

func TestWrongParent(t *testing.T) {
	store := t.TempDir()
	chain3(t, store)
	// Replace d1 with another snapshot of the same id: d2 no longer
	// applies over it.
	os.RemoveAll(filepath.Join(store, "d1"))
	base, err := Open(filepath.Join(store, "base"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(filepath.Join(store, "d1"), ram(set(7), 99), set(7), base, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Chain(filepath.Join(store, "d3")); !errors.Is(err, ErrWrongParent) {
		t.Errorf("Chain over a replaced parent = %v; want ErrWrongParent", err)
	}
	os.RemoveAll(filepath.Join(store, "d1"))
	if _, err := Chain(filepath.Join(store, "d3")); !errors.Is(err, ErrNotExist) {
		t.Errorf("Chain with a missing parent = %v; want ErrNotExist", err)
	}
	other := t.TempDir()
	if _, err := Write(filepath.Join(other, "x"), ram(set(1), 1), set(1), base, nil); err == nil {
		t.Errorf("Write accepted a parent from another store")
	}
}

// TestCorruption: every damaged snapshot is refused by Open (meta) or
// Verify (data), with ErrCorrupt or ErrVersion.
func TestCorruption(t *testing.T) {
	damage := map[string]struct {
		file string
		f    func(b []byte) []byte
		want error
	}{
		"meta byte flipped":     {MetaFile, func(b []byte) []byte { b[100] ^= 1; return b }, ErrCorrupt},
		"meta truncated":        {MetaFile, func(b []byte) []byte { return b[:len(b)-7] }, ErrCorrupt},
		"meta empty":            {MetaFile, func(b []byte) []byte { return nil }, ErrCorrupt},
		"bad magic":             {MetaFile, func(b []byte) []byte { b[0] = 'X'; return b }, ErrCorrupt},
		"mem truncated":         {MemFile, func(b []byte) []byte { return b[:len(b)-PageSize] }, ErrCorrupt},
		"mem byte flipped":      {MemFile, func(b []byte) []byte { b[PageSize+3] ^= 0x40; return b }, ErrCorrupt},
		"version 3":             {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 3); return resum(b) }, ErrVersion},
		"version 0":             {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0); return resum(b) }, ErrVersion},
		"version 1, CRC-32 sum": {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1); return resum(b) }, ErrCorrupt},
		"runs overlap":          {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint64(b[80+5+runSize:], 0); return resum(b) }, ErrCorrupt},
		"run beyond memory":     {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint64(b[80+5:], 1<<40); return resum(b) }, ErrCorrupt},
		"state length too big":  {MetaFile, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[40:], 1<<30); return resum(b) }, ErrCorrupt},
	}
	for name, d := range damage {
		t.Run(name, func(t *testing.T) {
			store := t.TempDir()
			dir := filepath.Join(store, "s")
			if _, err := Write(dir, ram(set(1, 2, 3, 10), 7), set(1, 2, 3, 10), nil, []byte("state")); err != nil {
				t.Fatal(err)
			}
			if d.file == MemFile {
				// A delta's packed mem, so truncation and flips hit data.
				os.RemoveAll(dir)
				b, _ := Write(filepath.Join(store, "b"), ram(set(1), 1), set(1), nil, nil)
				if _, err := Write(dir, ram(set(1, 2, 3), 7), set(1, 2, 3), b, nil); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, d.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, d.f(b), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				err = Verify(s)
			}
			if !errors.Is(err, d.want) {
				t.Errorf("Open+Verify = %v; want %v", err, d.want)
			}
		})
	}
}

// TestReadsVersion1: a snapshot written in format version 1 (its data
// summed with CRC-32C) opens, verifies, and is the parent of a delta
// written now (version 2, CRC-32), which restores over it.
func TestReadsVersion1(t *testing.T) {
	store := t.TempDir()
	dir := filepath.Join(store, "old")
	mem := ram(set(1, 2, 3, 10), 7)
	if _, err := Write(dir, mem, set(1, 2, 3, 10), nil, []byte("state")); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, MemFile))
	if err != nil {
		t.Fatal(err)
	}
	crc := uint32(0)
	for _, r := range s.Runs {
		crc = crc32.Update(crc, castagnoli, data[r.Offset:r.Offset+r.Count*PageSize])
	}
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[8:], 1)
	binary.LittleEndian.PutUint32(b[32:], crc)
	if err := os.WriteFile(filepath.Join(dir, MetaFile), resum(b), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if old.Version != 1 {
		t.Fatalf("Version = %d; want 1", old.Version)
	}
	if err := Verify(old); err != nil {
		t.Fatalf("Verify of a version 1 snapshot: %v", err)
	}
	mem[2*PageSize] = 0xee
	d, err := Write(filepath.Join(store, "new"), mem, set(2), old, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != Version {
		t.Fatalf("Write wrote version %d; want %d", d.Version, Version)
	}
	if !bytes.Equal(verifiedChain(t, d.Dir), mem) {
		t.Errorf("the chain of a version 1 full and a version 2 delta maps other memory than was written")
	}
}

// verifiedChain opens the chain ending at dir, verifies each snapshot's
// data and returns the chain's memory, mapped until the test ends.
func verifiedChain(t *testing.T, dir string) []byte {
	t.Helper()
	chain, err := Chain(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range chain {
		if err := Verify(s); err != nil {
			t.Fatalf("Verify(%s): %v", s.ID, err)
		}
	}
	mp, err := Map(chain)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mp.Unmap() })
	return mp.Mem
}

// resum rewrites a meta file's trailer after an edit, so only the edited
// field is wrong.
func resum(b []byte) []byte {
	m := bytes.Clone(b[:len(b)-sumSize])
	sum := sha256.Sum256(m)
	return append(m, sum[:]...)
}

func TestAtomicWrite(t *testing.T) {
	store := t.TempDir()
	dir := filepath.Join(store, "s")
	if _, err := Write(dir, ram(set(1), 1), set(1), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, ram(set(2), 1), set(2), nil, nil); !errors.Is(err, ErrExist) {
		t.Errorf("second Write of one id = %v; want ErrExist", err)
	}
	// An empty directory in the way is not replaced either.
	os.Mkdir(filepath.Join(store, "e"), 0o700)
	if _, err := Write(filepath.Join(store, "e"), ram(set(2), 1), set(2), nil, nil); !errors.Is(err, ErrExist) {
		t.Errorf("Write over an empty directory = %v; want ErrExist", err)
	}
	// A failed write leaves nothing (a page set too small for memory).
	if _, err := Write(filepath.Join(store, "f"), ram(set(2), 1), Pages{}, nil, nil); err == nil {
		t.Errorf("Write with a short page set succeeded")
	}
	// What a kill leaves (a .tmp- directory) is not listed, and Clean
	// removes it.
	os.Mkdir(filepath.Join(store, tmpMark+"k-123"), 0o700)
	os.WriteFile(filepath.Join(store, tmpMark+"k-123", MemFile), []byte("x"), 0o600)
	ids, err := List(store)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "s" {
		t.Errorf("List = %q; want [s]", ids)
	}
	if err := Clean(store); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(store)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "e,s" {
		t.Errorf("store after Clean holds %q; want [e s]", names)
	}
}

func TestPagesRuns(t *testing.T) {
	s := NewPages(200)
	s.SetRange(3, 70)
	s.Set(100)
	s.SetRange(128, 64)
	got := s.Runs(0)
	want := []Run{{Page: 3, Count: 70}, {Page: 100, Count: 1}, {Page: 128, Count: 64}}
	if len(got) != len(want) {
		t.Fatalf("Runs = %v; want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("Runs[%d] = %v; want %v", i, got[i], want[i])
		}
	}
	if n := s.Count(); n != 135 {
		t.Errorf("Count = %d; want 135", n)
	}
	if r := s.Runs(50); len(r) != 5 {
		t.Errorf("Runs(50) = %v; want 5 runs", r)
	}
}

// TestPagesRunsRandom compares Runs with a page-by-page walk over sets
// of every density, word edges included.
func TestPagesRunsRandom(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	for i := 0; i < 300; i++ {
		n := uint64(1 + rnd.Intn(700))
		s := NewPages(n)
		density := rnd.Float64()
		for p := uint64(0); p < n; p++ {
			if rnd.Float64() < density {
				s.Set(p)
			}
		}
		if i%7 == 0 {
			s.SetRange(0, n) // every page: one run to the end
		}
		maxRun := uint64(rnd.Intn(3)) * uint64(1+rnd.Intn(100))
		var want []Run
		for p := uint64(0); p < uint64(len(s))*64; p++ {
			if !s.Has(p) {
				continue
			}
			if k := len(want); k > 0 && want[k-1].Page+want[k-1].Count == p && (maxRun == 0 || want[k-1].Count < maxRun) {
				want[k-1].Count++
			} else {
				want = append(want, Run{Page: p, Count: 1})
			}
		}
		if got := s.Runs(maxRun); !reflect.DeepEqual(got, want) {
			t.Fatalf("set %d (n=%d, maxRun=%d): Runs = %v; want %v", i, n, maxRun, got, want)
		}
	}
}

func TestNeedsCompaction(t *testing.T) {
	full := &Snapshot{Meta: Meta{ID: "f"}}
	delta := &Snapshot{Meta: Meta{ID: "d", Parent: "f", Runs: make([]Run, 10)}}
	chain := []*Snapshot{full}
	for range CompactDepth - 2 {
		chain = append(chain, delta)
	}
	if ShapeOf(chain).NeedsCompaction(5) {
		t.Errorf("NeedsCompaction(%d snapshots, %d runs) = true", len(chain), 10*(len(chain)-1)+5)
	}
	if !ShapeOf(append(chain, delta)).NeedsCompaction(5) {
		t.Errorf("NeedsCompaction(%d snapshots) = false; want true", len(chain)+1)
	}
	if !ShapeOf(chain[:2]).NeedsCompaction(CompactRuns) {
		t.Errorf("NeedsCompaction(%d runs) = false; want true", CompactRuns+10)
	}
}

// TestUnchanged: a snapshot is known unchanged by one stat while its
// meta is the file Write or Open saw (a chmod or chown of it included),
// and not once another snapshot of the same id took its place, nor where
// no snapshot is.
func TestUnchanged(t *testing.T) {
	store := t.TempDir()
	dir := filepath.Join(store, "s")
	pg := set(1, 2)
	w, err := Write(dir, ram(pg, 1), pg, nil, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Unchanged(dir) || !o.Unchanged(dir) {
		t.Fatalf("a snapshot just written or opened is not known unchanged (written %v, opened %v)", w.Unchanged(dir), o.Unchanged(dir))
	}
	if err := os.Chmod(filepath.Join(dir, MetaFile), 0o444); err != nil {
		t.Fatal(err)
	}
	if !w.Unchanged(dir) {
		t.Error("a chmod of its meta made the snapshot look changed")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if w.Unchanged(dir) {
		t.Error("a removed snapshot is known unchanged")
	}
	if _, err := Write(dir, ram(pg, 2), pg, nil, []byte("two, in its place")); err != nil {
		t.Fatal(err)
	}
	if w.Unchanged(dir) || o.Unchanged(dir) {
		t.Error("another snapshot of the same id is known unchanged as the first")
	}
	if (&Snapshot{}).Unchanged(dir) {
		t.Error("a snapshot with no meta identity is known unchanged")
	}
}
