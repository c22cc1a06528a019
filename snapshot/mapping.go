package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// Compaction thresholds: a chain deeper than CompactDepth snapshots, or
// whose deltas hold more than CompactRuns runs (each is a mapping, and a
// process has vm.max_map_count of them, 65530 by default), should get a
// full snapshot next instead of another delta (Shape.NeedsCompaction).
const (
	CompactDepth = 16
	CompactRuns  = 8192
)

// Mapping is a chain mapped as guest RAM.
type Mapping struct {
	Mem   []byte // MemBytes, MAP_PRIVATE: writes never reach the files
	Maps  int    // mmap calls made: 1 + the deltas' runs
	Pages Pages  // pages the chain holds (the union of its runs)
}

// Map maps chain (full snapshot first, as Chain returns it) as one
// MAP_PRIVATE region: the full image whole, then each delta's runs
// MAP_FIXED over it, in order. Nothing is read: pages fault in lazily,
// and unwritten ones stay shared with the page cache. Cost: O(runs).
func Map(chain []*Snapshot) (mp *Mapping, err error) {
	if len(chain) == 0 || !chain[0].Full() {
		return nil, fmt.Errorf("map snapshot: chain does not start with a full snapshot: %w", ErrWrongParent)
	}
	size := chain[0].MemBytes
	mp = &Mapping{Pages: NewPages(size / PageSize)}
	f, err := os.Open(filepath.Join(chain[0].Dir, MemFile))
	if err != nil {
		return nil, fmt.Errorf("map snapshot %s: %w", msg.Cite(chain[0].Dir), err)
	}
	mp.Mem, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("map snapshot %s: %w", msg.Cite(chain[0].Dir), err)
	}
	mp.Maps = 1
	defer func() {
		if err != nil {
			unix.Munmap(mp.Mem)
			mp = nil
		}
	}()
	for i, s := range chain {
		if s.MemBytes != size || (i > 0 && (s.Full() || s.ParentSum != chain[i-1].Sum)) {
			return nil, fmt.Errorf("map snapshot %s: not a delta over %s: %w", msg.Cite(s.Dir), msg.Cite(chain[max(i-1, 0)].ID), ErrWrongParent)
		}
		for _, r := range s.Runs {
			mp.Pages.SetRange(r.Page, r.Count)
		}
		if i > 0 {
			if err := mapRuns(mp, s); err != nil {
				return nil, err
			}
		}
	}
	return mp, nil
}

// mapRuns maps delta s's runs over mp.Mem.
func mapRuns(mp *Mapping, s *Snapshot) error {
	f, err := os.Open(filepath.Join(s.Dir, MemFile))
	if err != nil {
		return fmt.Errorf("map snapshot %s: %w", msg.Cite(s.Dir), err)
	}
	defer f.Close()
	for _, r := range s.Runs {
		addr := unsafe.Pointer(&mp.Mem[r.Page*PageSize])
		if _, err := unix.MmapPtr(int(f.Fd()), int64(r.Offset), addr, uintptr(r.Count*PageSize),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
			return fmt.Errorf("map snapshot %s: run at page %d: %w", msg.Cite(s.Dir), r.Page, err)
		}
		mp.Maps++
	}
	return nil
}

// Unmap releases the mapping.
func (mp *Mapping) Unmap() error {
	if mp.Mem == nil {
		return nil
	}
	err := unix.Munmap(mp.Mem)
	mp.Mem = nil
	return err
}

// Shape is what a machine keeps of its snapshot chain, full snapshot
// first, so as not to read the chain again for each delta: each
// snapshot's id and how many runs it holds (which decide compaction).
type Shape []Link

// Link is one snapshot of a Shape.
type Link struct {
	ID   string
	Runs int
}

// ShapeOf returns chain's.
func ShapeOf(chain []*Snapshot) Shape {
	c := make(Shape, len(chain))
	for i, s := range chain {
		c[i] = Link{s.ID, len(s.Runs)}
	}
	return c
}

// NeedsCompaction reports whether the next snapshot over a chain of
// this shape should be a full one rather than a delta of extraRuns runs.
func (c Shape) NeedsCompaction(extraRuns int) bool {
	runs := extraRuns
	for _, l := range c[min(1, len(c)):] {
		runs += l.Runs
	}
	return len(c) >= CompactDepth || runs > CompactRuns
}

// Present checks that every snapshot of c is still in store (its meta
// file is there: one stat each, not Open's read and checksum), so that
// a delta over the last is not written over a chain that lost a link.
func (c Shape) Present(store string) error {
	for _, l := range c {
		if _, err := os.Lstat(filepath.Join(store, l.ID, MetaFile)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = ErrNotExist
			}
			return fmt.Errorf("snapshot chain in %s: %s: %w", msg.Cite(store), msg.Cite(l.ID), err)
		}
	}
	return nil
}

// Compact writes the chain ending at src as one full snapshot at dst
// (atomically, like Write), after checking every snapshot's data. The
// chain is left as it is.
func Compact(src, dst string) (*Snapshot, error) {
	chain, err := Chain(src)
	if err != nil {
		return nil, err
	}
	for _, s := range chain {
		if err := Verify(s); err != nil {
			return nil, fmt.Errorf("compact %s: %w", msg.Cite(src), err)
		}
	}
	mp, err := Map(chain)
	if err != nil {
		return nil, err
	}
	defer mp.Unmap()
	return Write(dst, mp.Mem, mp.Pages, nil, chain[len(chain)-1].State)
}
