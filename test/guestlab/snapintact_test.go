package guestlab

import (
	"os"
	"path/filepath"
	"testing"

	"sandfs/snapshot"
)

// TestSnapFilesKept (a short name: the socket paths under its temporary
// directory must fit in 96 bytes): restoring sandboxes from a snapshot and running
// them (two at once, writing much of their memory) leaves the files of
// every snapshot in the daemon's state as they were written: each one's
// data still matches its checksum. Restores map the files MAP_PRIVATE; a
// write reaching a file (or its page cache) would change what the next
// restore of it sees.
func TestSnapFilesKept(t *testing.T) {
	need(t)
	d := startDaemon(t)
	d.mustSh(t, "echo 'new a' > ctl")
	d.waitAgent(t, "a")
	touch := func(id string) {
		t.Helper()
		d.mustSh(t, "cd sandboxes/"+id+" && echo 'dd if=/dev/urandom of=/dev/shm/fill bs=1M count=48 2>/dev/null; sync; echo ok' > exec && cat exec")
	}
	touch("a")
	d.mustSh(t, "echo snapshot s1 > sandboxes/a/ctl")
	for _, id := range []string{"b", "c"} {
		d.mustSh(t, "echo new "+id+" from=s1 > ctl")
		d.waitAgent(t, id)
	}
	for _, id := range []string{"a", "b", "c"} {
		touch(id)
	}
	st := filepath.Join(filepath.Dir(d.mnt), "st")
	n := 0
	filepath.Walk(st, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Name() != snapshot.MetaFile {
			return nil
		}
		s, err := snapshot.Open(filepath.Dir(p))
		if err != nil {
			return nil // not a snapshot (or being written)
		}
		n++
		if err := snapshot.Verify(s); err != nil {
			t.Errorf("after restores: %v", err)
		}
		return nil
	})
	if n < 2 {
		t.Errorf("verified %d snapshots; want the template's and s1", n)
	}
	t.Logf("%d snapshots verified", n)
}
