package blk

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func makeBase(t *testing.T, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	p := filepath.Join(t.TempDir(), "base.img")
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func TestCOWModel(t *testing.T) {
	for _, mode := range []string{"overlay", "auto", "reflink"} {
		noReflink := mode == "overlay"
		t.Run(mode, func(t *testing.T) {
			const size = 64*ChunkSize + 1024 // a partial last chunk
			base, model := makeBase(t, size)
			orig := bytes.Clone(model)
			ov := filepath.Join(t.TempDir(), "disk.overlay")
			c, err := OpenCOW(base, ov, COWOptions{NoReflink: noReflink, copyForReflink: mode == "reflink"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("reflink=%v", c.Reflink())
			if mode == "reflink" && !c.Reflink() {
				t.Fatal("not in reflink mode")
			}
			r := rand.New(rand.NewPCG(3, 4))
			for i := range 300 {
				off := r.IntN(size)
				n := 1 + r.IntN(min(size-off, 3*ChunkSize))
				if r.IntN(2) == 0 {
					p := make([]byte, n)
					for j := range p {
						p[j] = byte(i)
					}
					if _, err := c.WriteAt(p, int64(off)); err != nil {
						t.Fatal(err)
					}
					copy(model[off:], p)
				} else {
					p := make([]byte, n)
					if _, err := c.ReadAt(p, int64(off)); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(p, model[off:off+n]) {
						t.Fatalf("op %d: ReadAt(%d, %d) differs from model", i, off, n)
					}
				}
				if i == 150 { // reopen half-way: the map must survive
					if err := c.Close(); err != nil {
						t.Fatal(err)
					}
					if c, err = OpenCOW(base, ov, COWOptions{NoReflink: noReflink}); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := make([]byte, size)
			if _, err := c.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model) {
				t.Fatal("final contents differ from model")
			}
			if _, err := c.WriteAt([]byte{1}, size); err == nil {
				t.Error("write beyond the end succeeded")
			}
			// A clone holds the same contents.
			if err := c.Clone(ov + ".clone"); err != nil {
				t.Fatal(err)
			}
			cl, err := OpenCOW(base, ov+".clone", COWOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got2 := make([]byte, size)
			if _, err := cl.ReadAt(got2, 0); err != nil || !bytes.Equal(got2, model) {
				t.Fatalf("clone contents differ (%v)", err)
			}
			cl.Close()
			c.Close()
			if b, _ := os.ReadFile(base); !bytes.Equal(b, orig) {
				t.Fatal("base image changed")
			}
		})
	}
}

func TestCOWBaseSizeChanged(t *testing.T) {
	base, _ := makeBase(t, 8*ChunkSize)
	ov := filepath.Join(t.TempDir(), "o")
	c, err := OpenCOW(base, ov, COWOptions{NoReflink: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	os.Chmod(base, 0o644)
	os.Truncate(base, 16*ChunkSize)
	if _, err := OpenCOW(base, ov, COWOptions{NoReflink: true}); err == nil {
		t.Fatal("reopen over a resized base succeeded")
	}
}

func TestCOWClone(t *testing.T) {
	base, orig := makeBase(t, 32*ChunkSize)
	dir := t.TempDir()
	c, err := OpenCOW(base, filepath.Join(dir, "a"), COWOptions{NoReflink: true})
	if err != nil {
		t.Fatal(err)
	}
	c.WriteAt(bytes.Repeat([]byte{1}, 100), 5*ChunkSize+7)
	c.WriteAt(bytes.Repeat([]byte{2}, 3*ChunkSize), 10*ChunkSize)
	if err := c.Clone(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	c.WriteAt(bytes.Repeat([]byte{3}, 10), 0) // after the clone: not in b
	want := bytes.Clone(orig)
	copy(want[5*ChunkSize+7:], bytes.Repeat([]byte{1}, 100))
	copy(want[10*ChunkSize:], bytes.Repeat([]byte{2}, 3*ChunkSize))
	c.Close()
	b, err := OpenCOW(base, filepath.Join(dir, "b"), COWOptions{NoReflink: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make([]byte, len(want))
	if _, err := b.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("clone differs")
	}
	if w := b.Written(); len(w) != 4 {
		t.Errorf("clone holds chunks %v, want 4", w)
	}
}

// TestCOWStartSync: the map StartSync stages is what Sync commits when no
// chunk was written between them, a write between them is not lost, and
// until Sync the map on disk is the one of the Sync before.
func TestCOWStartSync(t *testing.T) {
	base, _ := makeBase(t, 32*ChunkSize)
	dir := t.TempDir()
	ov := filepath.Join(dir, "a")
	c, err := OpenCOW(base, ov, COWOptions{NoReflink: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	onDisk := func() []int64 { // the chunks the map on disk holds
		t.Helper()
		d, err := OpenCOW(base, ov, COWOptions{NoReflink: true})
		if err != nil {
			t.Fatal(err)
		}
		defer d.over.Close() // not Close: that would write its map
		defer d.base.Close()
		return d.Written()
	}
	write := func(chunk int64) {
		t.Helper()
		if _, err := c.WriteAt([]byte{7}, chunk*ChunkSize); err != nil {
			t.Fatal(err)
		}
	}
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	write(5)
	step("StartSync", c.StartSync())
	if got := onDisk(); len(got) != 0 {
		t.Fatalf("after StartSync the map on disk holds %v; want the last Sync's (none)", got)
	}
	step("Sync", c.Sync())
	if got := onDisk(); !slices.Equal(got, []int64{5}) {
		t.Fatalf("after StartSync, Sync: map holds %v; want [5]", got)
	}
	step("StartSync", c.StartSync())
	write(9) // a new chunk after StartSync
	step("Sync", c.Sync())
	if got := onDisk(); !slices.Equal(got, []int64{5, 9}) {
		t.Fatalf("StartSync, write, Sync: map holds %v; want [5 9]", got)
	}
	step("StartSync", c.StartSync()) // nothing changed
	step("Sync", c.Sync())
	if got := onDisk(); !slices.Equal(got, []int64{5, 9}) {
		t.Fatalf("StartSync, Sync with nothing written: map holds %v; want [5 9]", got)
	}
}

// TestNextWritten: the word-at-a-time scan finds what testing each chunk
// finds, on maps with runs, single chunks, word edges and a last word
// the disk fills only in part.
func TestNextWritten(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, nChunks := range []int64{1, 63, 64, 65, 130, 1000, 4099} {
		for trial := 0; trial < 20; trial++ {
			c := &COW{size: nChunks * ChunkSize, bits: make([]byte, (nChunks+7)/8)}
			for k := 0; k < trial; k++ {
				ch := rng.Int64N(nChunks)
				for l := rng.Int64N(3); l >= 0 && ch < nChunks; l-- {
					c.bits[ch/8] |= 1 << (ch % 8)
					ch++
				}
			}
			for from := int64(0); from <= nChunks; from++ {
				want := from
				for want < nChunks && !c.has(want) {
					want++
				}
				if got := c.nextWritten(from); got != want {
					t.Fatalf("%d chunks, map %x: nextWritten(%d) = %d, want %d", nChunks, c.bits, from, got, want)
				}
			}
		}
	}
}
