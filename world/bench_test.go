package world

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// BenchmarkUnion compares operations through a world's nodes (in
// process, no transport) with the same system calls on the lower
// directly: stat of a file 6 directories deep, a 1 MiB read in 128 KiB
// reads, and creating a small file. The ratio of each pair (union/direct)
// is the union's cost (docs/worlds.md).
func BenchmarkUnion(b *testing.B) {
	lower := b.TempDir()
	deep := "a/b/c/d/e/f"
	if err := os.MkdirAll(filepath.Join(lower, deep), 0o755); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1<<20)
	if err := os.WriteFile(filepath.Join(lower, deep, "file"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	w, err := Open(lower, b.TempDir(), Overlay)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	root, _ := w.Root()
	p := deep + "/file"
	buf := make([]byte, 128<<10)
	b.Run("stat/union", func(b *testing.B) {
		for b.Loop() {
			n, err := sfs.Walk(bg, root, p)
			if err == nil {
				_, err = n.Stat(bg)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stat/direct", func(b *testing.B) {
		var st unix.Stat_t
		for b.Loop() {
			if err := unix.Lstat(filepath.Join(lower, p), &st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read1M/union", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			n, _ := sfs.Walk(bg, root, p)
			h, err := sfs.Open(bg, n, sfs.ReadOnly)
			if err != nil {
				b.Fatal(err)
			}
			for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
				h.Read(bg, buf, off)
			}
			h.Close()
		}
	})
	b.Run("read1M/direct", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			f, err := os.Open(filepath.Join(lower, p))
			if err != nil {
				b.Fatal(err)
			}
			for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
				f.ReadAt(buf, off)
			}
			f.Close()
		}
	})
	d, _ := sfs.Walk(bg, root, deep)
	i := 0
	b.Run("create/union", func(b *testing.B) {
		for b.Loop() {
			i++
			_, h, err := d.(sfs.Creator).Create(bg, fmt.Sprint("u", i), sfs.WriteOnly, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			h.Write(bg, []byte("x"), 0)
			h.Close()
		}
	})
	b.Run("create/direct", func(b *testing.B) {
		for b.Loop() {
			i++
			if err := os.WriteFile(filepath.Join(lower, deep, fmt.Sprint("d", i)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
}
