package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sandfs/test/testenv"
)

// needE2fsprogs: the state disk is made and checked on the host, which
// has e2fsprogs; the lab (busybox only) runs none of this.
func needE2fsprogs(t *testing.T) {
	t.Helper()
	if inLab {
		t.Skip("inside the lab: the state disk is the host's (the host stage runs this)")
	}
	for _, p := range []string{"mkfs.ext4", "e2fsck", "resize2fs"} {
		_, err := exec.LookPath(p)
		testenv.Need(t, err == nil, p+" (apt-get install e2fsprogs)")
	}
}

// isExt4 reports whether p holds an ext4 file system e2fsck finds clean.
func isExt4(t *testing.T, p string) bool {
	t.Helper()
	out, err := exec.Command("e2fsck", "-n", "-f", p).CombinedOutput()
	if err != nil {
		t.Logf("e2fsck -n %s: %v\n%s", p, err, out)
	}
	return err == nil
}

func TestStateDiskCreateLockGrow(t *testing.T) {
	needE2fsprogs(t)
	p := filepath.Join(t.TempDir(), "sub", "state.ext4")
	d, err := OpenStateDisk(p, 128<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != 128<<20 {
		t.Fatalf("image after create: %v, %v; want 128 MiB", fi, err)
	}
	if !isExt4(t, p) {
		t.Fatal("new image is not a clean ext4")
	}
	// One lab at a time: a second owner is refused and named.
	if _, err := OpenStateDisk(p, 128<<20, nil); err == nil || !strings.Contains(err.Error(), "in use by another lab") {
		t.Fatalf("second OpenStateDisk = %v; want in use", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	var logged []string
	d, err = OpenStateDisk(p, 256<<20, func(f string, a ...any) { logged = append(logged, f) })
	if err != nil {
		t.Fatalf("reopen to grow: %v", err)
	}
	defer d.Close()
	if fi, err := os.Stat(p); err != nil || fi.Size() != 256<<20 {
		t.Fatalf("image after grow: %v, %v; want 256 MiB", fi, err)
	}
	if !isExt4(t, p) || len(logged) != 1 || !strings.Contains(logged[0], "grown") {
		t.Fatalf("grown image: log %q", logged)
	}
}

// TestStateDiskDamaged: an image e2fsck cannot repair (no superblock) is
// moved aside and replaced.
func TestStateDiskDamaged(t *testing.T) {
	needE2fsprogs(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "state.ext4")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 128<<20); err != nil {
		t.Fatal(err)
	}
	d, err := OpenStateDisk(p, 128<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !isExt4(t, p) {
		t.Fatal("the replacement is not a clean ext4")
	}
	aside, _ := filepath.Glob(p + ".damaged-*")
	if len(aside) != 1 {
		t.Fatalf("damaged image not kept aside: %q", aside)
	}
	if _, err := OpenStateDisk(filepath.Join(dir, "x"), 1<<20, nil); err == nil {
		t.Fatal("a 1 MiB state disk was accepted")
	}
}
