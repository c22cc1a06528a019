package guestlab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTemplateSnapshot: every `new` restores its template's snapshot for
// its shape (built by the first `new` of that shape, once): status says
// boot=restore; each restored guest has its own hostname, its own random
// bytes, the host's wall clock and its own disk layer; another shape gets
// an entry of its own. It logs the time from `new` to a serving agent,
// first (cold boot, snapshot, restore) and then (restore only).
func TestTemplateSnapshot(t *testing.T) {
	need(t)
	d := startDaemon(t)
	state := filepath.Join(filepath.Dir(d.mnt), "st")
	newServing := func(id, keys string) time.Duration {
		t.Helper()
		start := time.Now()
		d.mustSh(t, "echo 'new "+id+" "+keys+"' > ctl")
		d.waitAgent(t, id)
		return time.Since(start)
	}
	first := newServing("a", "")
	// The snapshot was saved before a's new returned. A restore that
	// missed the time write would run b's clock from then: b restores
	// at least clockGap later, so its clock check below can fail (the
	// lab's slowness alone made the gap 2 to 7 s, inside the check's 5 s
	// on a fast run).
	const clockGap = 10 * time.Second
	time.Sleep(clockGap)
	second := newServing("b", "")
	for _, l := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(l, "agent serving") {
			t.Log("daemon: " + l)
		}
	}
	t.Logf("new to a serving agent: first %v (builds the template snapshot), second %v (restore): ratio %.1f",
		first.Round(time.Millisecond), second.Round(time.Millisecond), float64(first)/float64(second))

	for _, id := range []string{"a", "b"} {
		st := strings.TrimSpace(d.mustSh(t, "cat sandboxes/"+id+"/status"))
		if !strings.HasSuffix(st, " boot=restore") {
			t.Errorf("%s status %q; want it to end with boot=restore", id, st)
		}
		if h := d.run(t, id, "hostname"); h != id {
			t.Errorf("%s: guest hostname %q", id, h)
		}
		g, err := strconv.ParseInt(d.run(t, id, "date +%s"), 10, 64)
		if off := time.Since(time.Unix(g, 0)); err != nil || off < -5*time.Second || off > 5*time.Second {
			t.Errorf("%s: guest clock %d (%v), off by %v from the host's", id, g, err, off)
		}
	}
	ra, rb := d.run(t, "a", "head -c 16 /dev/urandom | od -An -tx1"), d.run(t, "b", "head -c 16 /dev/urandom | od -An -tx1")
	if len(ra) < 32 || ra == rb {
		t.Errorf("16 random bytes: a %q, b %q; want different", ra, rb)
	}
	// Own disk layer: a synced file of a is not in b, and the layers are
	// distinct files.
	d.run(t, "a", "echo mine > /root/marker; sync")
	if out, err := d.sh(t, "cd sandboxes/b && echo 'cat /root/marker 2>&1; true' > exec && cat exec"); err != nil || strings.Contains(out, "mine") {
		t.Errorf("b reads a's file: %q, %v", out, err)
	}
	ino := func(p string) uint64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	if ino(filepath.Join(state, "run/a/work/rootfs.cow")) == ino(filepath.Join(state, "run/b/work/rootfs.cow")) {
		t.Error("a and b share one disk layer file")
	}

	// Another shape: its own cache entry, built once.
	third := newServing("c", "mem=512M")
	t.Logf("new of another shape (mem=512M, builds its entry): %v", third.Round(time.Millisecond))
	if st := d.mustSh(t, "cat sandboxes/c/status"); !strings.Contains(st, " mem=512M ") || !strings.HasSuffix(strings.TrimSpace(st), " boot=restore") {
		t.Errorf("c status %q", st)
	}
	ents, _ := filepath.Glob(filepath.Join(state, "templates", "base-*"))
	if len(ents) != 2 {
		t.Errorf("template cache entries %v; want 2 (256m1c, 512m1c)", ents)
	}
}
