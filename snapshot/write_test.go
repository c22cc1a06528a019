package snapshot

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestWriteManyRuns writes a delta of more runs than one pwritev takes
// (maxIov) and a full snapshot of as many, and checks that the chain maps
// back to the RAM it was taken of and that the data's checksum verifies:
// the runs are grouped into pwritev calls, and a group boundary or a
// wrong offset would misplace pages.
func TestWriteManyRuns(t *testing.T) {
	const pages = 6*maxIov + 100
	store := t.TempDir()
	mem := make([]byte, pages*PageSize)
	fill := func(p uint64, seed byte) {
		for i := range PageSize {
			mem[p*PageSize+uint64(i)] = byte(p>>8) ^ byte(p) + seed + byte(i)
		}
	}
	odd, even := NewPages(pages), NewPages(pages)
	for p := uint64(0); p < pages; p++ {
		if p%2 == 0 {
			even.Set(p)
		} else {
			odd.Set(p)
		}
		fill(p, 1)
	}
	base, err := Write(filepath.Join(store, "base"), mem, even, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for p := uint64(0); p < pages; p += 3 {
		fill(p, 7) // some pages change after the base: the delta must win
	}
	all := NewPages(pages)
	all.Or(odd)
	for p := uint64(0); p < pages; p += 3 {
		all.Set(p)
	}
	d, err := Write(filepath.Join(store, "d"), mem, all, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) <= maxIov {
		t.Fatalf("the delta has %d runs; the test needs more than %d", len(d.Runs), maxIov)
	}
	got := verifiedChain(t, d.Dir)
	if !bytes.Equal(got, mem) {
		for p := uint64(0); p < pages; p++ {
			if !bytes.Equal(got[p*PageSize:(p+1)*PageSize], mem[p*PageSize:(p+1)*PageSize]) {
				t.Fatalf("page %d of the mapped chain differs from the RAM", p)
			}
		}
	}
}

func TestSkipBytes(t *testing.T) {
	iov := [][]byte{[]byte("abc"), []byte("de"), []byte("f")}
	got := skipBytes(iov, 4)
	if len(got) != 2 || string(got[0]) != "e" || string(got[1]) != "f" {
		t.Errorf("skipBytes(abc de f, 4) = %q", got)
	}
	if got := skipBytes([][]byte{[]byte("ab")}, 2); len(got) != 0 {
		t.Errorf("skipBytes(ab, 2) = %q", got)
	}
}
