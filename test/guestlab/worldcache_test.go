package guestlab

import (
	"strings"
	"testing"
)

// TestWorldGuestCache: /workspace is mounted cache=loose with every
// write synchronous (guest/workspace.go), so the guest's writes are the
// daemon's when write(2) returns (the host reads them at once: with
// loose alone they stayed in the guest's page cache), and what the
// daemon changes under the guest becomes visible in it (it fails without
// the daemon's "forget") (docs/worlds.md "Cache mode"): an apply of
// another world over the same lower (a file rewritten, one added, one
// deleted) and a discard of the guest's own world, after the guest had
// read, listed and stat'ed them.
func TestWorldGuestCache(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := newLower(t, map[string]string{"a.txt": "alpha\n", "d/b.txt": "beta\n"})
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'world v lower="+lower+"' > ctl; echo 'new t template=base world=w' > ctl")
	d.waitAgent(t, "t")
	guest := func(cmd string) string {
		t.Helper()
		return d.mustSh(t, `echo '`+cmd+`' > sandboxes/t/exec; cat sandboxes/t/exec`)
	}
	if m := guest(`grep " /workspace " /proc/mounts`); !strings.Contains(m, ",sync,") || !strings.Contains(m, ",loose,") {
		t.Errorf("/workspace mount = %q, want sync and cache=loose", m)
	}
	// A write the guest made is the host's when it returns: no flush, no
	// wait between them.
	if got := d.mustSh(t, `echo 'echo written > /workspace/w.txt; echo more >> /workspace/w.txt' > sandboxes/t/exec; cat sandboxes/t/exec; cat worlds/w/fs/w.txt worlds/w/upper/w.txt`); got != "written\nmore\nwritten\nmore\n" {
		t.Errorf("the guest's write, read on the host right after: %q, want it twice (fs/ and upper/)", got)
	}
	guest(`rm /workspace/w.txt`)
	look := `cat /workspace/a.txt; stat -c %s /workspace/a.txt; ls /workspace /workspace/d`
	if got, want := guest(look), "alpha\n6\n/workspace:\na.txt\nd\n\n/workspace/d:\nb.txt\n"; got != want {
		t.Fatalf("before: %q, want %q", got, want)
	}
	// Another world over the same lower changes it and applies.
	d.mustSh(t, "echo 'alpha, applied by v' > worlds/v/fs/a.txt; echo new > worlds/v/fs/n.txt; rm worlds/v/fs/d/b.txt; echo apply > worlds/v/ctl")
	if got, want := guest(look), "alpha, applied by v\n20\n/workspace:\na.txt\nd\nn.txt\n\n/workspace/d:\n"; got != want {
		t.Errorf("after v's apply, in w's guest: %q, want %q", got, want)
	}
	// The guest's own change, then a discard of its world.
	guest(`echo mine > /workspace/a.txt; cat /workspace/a.txt`)
	d.mustSh(t, "echo discard > worlds/w/ctl")
	if got, want := guest(`cat /workspace/a.txt`), "alpha, applied by v\n"; got != want {
		t.Errorf("after w's discard, in its guest: %q, want %q", got, want)
	}
}
