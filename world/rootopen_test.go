package world

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRootOpens: the daemon opens the lower's files as root, so the union
// must not open what the kernel guards at open by the opener's
// credentials rather than by mode bits: a device (here a copy of
// /dev/null; /dev/kmsg checks CAP_SYSLOG) and anything on a mount under
// the lower (/proc/<pid>/maps and /proc/kallsyms under lower=/; here a
// tmpfs). Both are refused; the lower's own files still read.
func TestRootOpens(t *testing.T) {
	lower := newLower(t)
	must(t, unix.Mknod(filepath.Join(lower, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	m := filepath.Join(lower, "mnt")
	must(t, os.Mkdir(m, 0o755))
	if err := unix.Mount("sandfs-test", m, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount a tmpfs under the lower: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
	must(t, os.WriteFile(filepath.Join(m, "secret"), []byte("on another mount"), 0o644))
	w := openWorld(t, lower, Overlay)
	tg := nodes(t, w)
	for _, p := range []string{"null", "mnt/secret"} {
		if s, err := tg.read(p); err == nil {
			t.Errorf("read %s through the union = %q; want refused", p, s)
		}
	}
	wantFile(t, tg, "a.txt", "alpha")
}
