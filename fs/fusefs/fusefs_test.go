package fusefs

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	sfs "sandfs/fs"
	"sandfs/test/testenv"
)

// TestChildrenGetNoFUSE: a process the daemon starts after mounting
// holds no descriptor of /dev/fuse (go-fuse's direct mount opens it
// without O_CLOEXEC; each VMM used to inherit the mount's connection).
func TestChildrenGetNoFUSE(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := t.TempDir()
	m, err := New(dir, sfs.Table[struct{}]{}.Dir(struct{}{}, 0o555, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	out, err := exec.Command("sh", "-c", "ls -l /proc/$$/fd/; exit 0").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Errorf("a child of the mounting process holds /dev/fuse:\n%s", out)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("mount point after the child: %v", err)
	}
}
