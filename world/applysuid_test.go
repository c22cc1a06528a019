package world

import (
	"os"
	"path/filepath"
	"testing"
)

// TestApplyNoSetuid: files in the upper are the daemon's (root's) with
// the modes the guest chose, and a copied-up setuid file keeps its bit
// while the guest rewrites it (the daemon writes with CAP_FSETID). Apply
// must not turn either into a setuid or setgid file in the lower (a
// root-owned setuid program of the guest's on the host).
func TestApplyNoSetuid(t *testing.T) {
	lower := newLower(t)
	tool := filepath.Join(lower, "tool")
	must(t, os.WriteFile(tool, []byte("the real tool"), 0o755))
	must(t, os.Chmod(tool, 0o4755))
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("tool", "the guest's program"))
	must(t, tg.write("new", "another program"))
	must(t, tg.chmod("new", 0o755|os.ModeSetuid|os.ModeSetgid))
	must(t, w.Apply(true))
	for _, n := range []string{"tool", "new"} {
		fi, err := os.Stat(filepath.Join(lower, n))
		must(t, err)
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("lower %s after apply: %v; want no setuid or setgid bit", n, fi.Mode())
		}
	}
	wantDisk(t, tool, "the guest's program")
}

// TestApplyThroughLowerLink: after the world changed dir/b.txt, the
// lower's dir is swapped for a symbolic link to a directory outside (as
// someone who may write the lower could). Apply must not write through
// it: it fails, or (force: the world's directory wins) replaces the link.
func TestApplyThroughLowerLink(t *testing.T) {
	lower, outside := newLower(t), t.TempDir()
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	must(t, tg.write("dir/b.txt", "through the link"))
	must(t, os.Rename(filepath.Join(lower, "dir"), filepath.Join(lower, "dir.old")))
	must(t, os.Symlink(outside, filepath.Join(lower, "dir")))
	if err := w.Apply(true); err == nil {
		wantDisk(t, filepath.Join(lower, "dir", "b.txt"), "through the link")
		if fi, err := os.Lstat(filepath.Join(lower, "dir")); err != nil || !fi.IsDir() {
			t.Errorf("lower dir after apply: %v, %v; want the world's directory", fi, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("apply wrote outside the lower: %v", ents)
	}
}
