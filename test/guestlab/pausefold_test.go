package guestlab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPauseFold (issue 11): pause to disk and resume, twice: the second
// image folds the first in, which the next resume drops (one image in
// the VMM's store); the first snapshot after a resume is a delta over
// the template's snapshot (not a full one), the next one after another
// pause a delta over it; rollback and new from= see what was there.
func TestPauseFold(t *testing.T) {
	need(t)
	d := startDaemon(t)
	d.mustSh(t, "echo 'new a' > ctl")
	d.waitAgent(t, "a")
	info := func(snap string) string {
		t.Helper()
		return strings.TrimSpace(d.mustSh(t, "cat snapshots/"+snap+"/info"))
	}
	store := filepath.Join(filepath.Dir(d.mnt), "st", "run", "a", "work", "snapshots")
	pauses := func() []string {
		t.Helper()
		ents, err := os.ReadDir(store)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "_pause-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	cycle := func() {
		t.Helper()
		d.mustSh(t, "echo pause > sandboxes/a/ctl")
		if st := d.mustSh(t, "cat sandboxes/a/status"); !strings.HasPrefix(st, "a paused ") || !strings.Contains(st, " pid=0 ") {
			t.Fatalf("a after pause: %q; want paused to disk", st)
		}
		d.mustSh(t, "echo resume > sandboxes/a/ctl")
	}

	d.run(t, "a", "echo 1 > /root/file; sync; echo 1 > /dev/shm/counter")
	cycle()
	d.run(t, "a", "echo 2 > /root/file; sync; echo 2 > /dev/shm/counter")
	cycle()
	if got := d.run(t, "a", "cat /root/file /dev/shm/counter"); got != "2\n2" {
		t.Errorf("a after two pauses: %q; want 2, 2", got)
	}
	if p := pauses(); len(p) != 1 {
		t.Errorf("pause images in a's store after two resumes: %v; want one", p)
	}
	d.mustSh(t, "echo snapshot s1 > sandboxes/a/ctl")
	if got := info("s1"); !strings.HasPrefix(got, "s1 sandbox=a parent=_base-") || !strings.HasSuffix(got, " kind=delta") {
		t.Errorf("s1 (the first snapshot after a resume) info %q; want a delta over the template's snapshot", got)
	}
	d.run(t, "a", "echo 3 > /root/file; sync; echo 3 > /dev/shm/counter")
	cycle()
	d.mustSh(t, "echo snapshot s2 > sandboxes/a/ctl")
	if got := info("s2"); !strings.HasPrefix(got, "s2 sandbox=a parent=s1 ") || !strings.HasSuffix(got, " kind=delta") {
		t.Errorf("s2 info %q; want a delta over s1", got)
	}
	t.Logf("snapshots: %s | %s", info("s1"), info("s2"))
	d.mustSh(t, "echo rollback s1 > sandboxes/a/ctl")
	if got := d.run(t, "a", "cat /root/file /dev/shm/counter"); got != "2\n2" {
		t.Errorf("a after rollback s1: %q; want 2, 2", got)
	}
	d.mustSh(t, "echo new b from=s2 > ctl")
	if got := strings.TrimSpace(d.mustSh(t, "cd sandboxes/b && echo 'cat /root/file /dev/shm/counter' > exec && cat exec")); got != "3\n3" {
		t.Errorf("b from s2: %q; want 3, 3", got)
	}
}
