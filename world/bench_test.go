package world

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
	"sandfs/fs/ninep"
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

// BenchmarkUnion9P is what the daemon does for a guest's /workspace
// request, without the guest and the VMM: the 9P server over a unix
// socket, a p9 client at the other end, asking for a getattr of a
// directory, the walk, getattr and clunk of a file (a cold stat by path
// in the guest) and its walk, open, read and clunk (a small-file read).
// docs/worlds.md has its figures.
func BenchmarkUnion9P(b *testing.B) {
	lower := b.TempDir()
	if err := os.MkdirAll(filepath.Join(lower, "d1"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "d1", "f1"), []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	w, err := Open(lower, b.TempDir(), Overlay)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	root, err := w.Root()
	if err != nil {
		b.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "9p")
		if conns[i], err = net.FileConn(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ninep.NewServer(root, nil).ServeConnAs(ctx, conns[0], cred.Self())
	cl, err := ninep.NewClient(conns[1], 256<<10)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.Attach("/")
	if err != nil {
		b.Fatal(err)
	}
	_, d, err := r.Walk([]string{"d1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("getattr", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, err := d.GetAttr(p9.AttrMaskAll); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walk+getattr+clunk", func(b *testing.B) {
		for b.Loop() {
			_, f, err := d.Walk([]string{"f1"})
			if err == nil {
				_, _, _, err = f.GetAttr(p9.AttrMaskAll)
				f.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	buf := make([]byte, 4096)
	// A guest's first write to a file of the lower: a copy-up of its
	// data at the open (worlds.py's copy-up row), of a file put in the
	// lower before each round, which the round does not time.
	n := 0
	b.Run("copyup:walk+open+write+clunk", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			n++
			name := fmt.Sprint("c", n)
			if err := os.WriteFile(filepath.Join(lower, "d1", name), buf, 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			_, f, err := d.Walk([]string{name})
			if err == nil {
				if _, _, err = f.Open(p9.WriteOnly); err == nil {
					_, err = f.WriteAt(buf[:100], 0)
				}
				f.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walk+open+read+clunk", func(b *testing.B) {
		for b.Loop() {
			_, f, err := d.Walk([]string{"f1"})
			if err == nil {
				if _, _, err = f.Open(p9.ReadOnly); err == nil {
					_, err = f.ReadAt(buf, 0)
				}
				f.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
