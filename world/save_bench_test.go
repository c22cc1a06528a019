package world

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkSave measures what a snapshot of a sandbox adds for its world
// (Save) and what its rollback adds (Restore), on an upper of 1000 files
// of 4 KiB and one of 32 MiB, against `cp -a` of the same upper (the
// plain copy it would otherwise take). The ratio save/cp-a is the cost of
// Save's own work (docs/worlds.md "Snapshots and clones").
func BenchmarkSave(b *testing.B) {
	lower := b.TempDir()
	w, err := Open(lower, b.TempDir(), Overlay)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	small, big := make([]byte, 4<<10), make([]byte, 32<<20)
	for i := range 1000 {
		d := filepath.Join(w.Upper(), fmt.Sprintf("d%02d", i/50))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), small, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.Upper(), "big"), big, 0o644); err != nil {
		b.Fatal(err)
	}
	bytes := int64(1000*len(small) + len(big))
	out := b.TempDir()
	saved := filepath.Join(out, "saved")
	if _, err := w.Save(saved); err != nil {
		b.Fatal(err)
	}
	n := 0
	next := func() string { n++; return filepath.Join(out, fmt.Sprint(n)) }
	b.Run("save", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			st, err := w.Save(next())
			if err != nil || st.Cloned+st.Copied != 1001 {
				b.Fatal(st, err)
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			if err := w.Restore(saved); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cp-a", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			if out, err := exec.Command("cp", "-a", w.Upper(), next()).CombinedOutput(); err != nil {
				b.Fatal(string(out), err)
			}
		}
	})
}
