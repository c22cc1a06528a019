package world

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestInoLayersApart: an entry only in the upper and one from the lower
// with the same inode number in their own file systems (the layers on
// two file systems) show different numbers, also once fs/ninep has
// cleared bit 63 to make a QID path (a guest's cache=loose mount takes
// two files with one QID path for one inode).
func TestInoLayersApart(t *testing.T) {
	w := &World{mode: Overlay, meta: &meta{}}
	for _, n := range []uint64{1, 2, 12345, 1<<32 + 7} {
		up := loc{up: true, us: unix.Stat_t{Ino: n}}
		low := loc{low: true, ls: unix.Stat_t{Ino: n}}
		u, l := w.ino(&up)&^(1<<63), w.ino(&low)&^(1<<63)
		if u == l {
			t.Errorf("ino %d: upper-only and lower entries both show %#x as a QID path", n, u)
		}
		if l != n {
			t.Errorf("ino %d: the lower's entry shows %#x, want its own number", n, l)
		}
	}
}
