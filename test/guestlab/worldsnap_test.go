package guestlab

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorldSnapshot: a snapshot of a sandbox with a world keeps the
// world's changes with the memory; rollback brings both back and the
// guest's /workspace works on (mounted again); a clone gets a world of
// its own with a copy of the changes; after the daemon is killed and
// started again, the guest's /workspace is mounted again, and so it is
// at the resume of a sandbox paused (to disk) across a restart.
func TestWorldSnapshot(t *testing.T) {
	need(t)
	d := startDaemon(t)
	lower := newLower(t, map[string]string{"a.txt": "alpha\n"})
	d.mustSh(t, "echo 'world w lower="+lower+"' > ctl; echo 'new t template=base world=w' > ctl")
	d.waitAgent(t, "t")
	guest := func(id, script string) string {
		t.Helper()
		return d.mustSh(t, "echo '"+script+"' > sandboxes/"+id+"/exec; cat sandboxes/"+id+"/exec")
	}
	guest("t", "echo one > /workspace/s.txt; echo A1 > /workspace/a.txt")
	start := time.Now()
	d.mustSh(t, "echo snapshot s1 > sandboxes/t/ctl")
	t.Logf("snapshot with the world: %v", time.Since(start).Round(time.Millisecond))
	guest("t", "echo two > /workspace/s.txt; echo later > /workspace/l.txt")

	start = time.Now()
	d.mustSh(t, "echo rollback s1 > sandboxes/t/ctl")
	t.Logf("rollback with the world: %v", time.Since(start).Round(time.Millisecond))
	got := guest("t", "cat /workspace/s.txt /workspace/a.txt; ls /workspace; echo after > /workspace/r.txt; cat /workspace/r.txt")
	if want := "one\nA1\na.txt\ns.txt\nafter\n"; got != want {
		t.Errorf("after rollback, in the guest:\n%s\nwant:\n%s", got, want)
	}
	const tDiff = "modified a.txt\nadded r.txt\nadded s.txt\n"
	if got := d.mustSh(t, "cat worlds/w/diff"); got != tDiff {
		t.Errorf("after rollback, diff:\n%s\nwant:\n%s", got, tDiff)
	}

	ids := strings.Fields(d.mustSh(t, "exec 3<>sandboxes/t/ctl; echo clone >&3; cat <&3"))
	if len(ids) != 1 {
		t.Fatalf("clone replied %q", ids)
	}
	c := ids[0]
	if got := guest(c, "cat /workspace/s.txt; echo c > /workspace/c.txt; ls /workspace"); got != "one\na.txt\nc.txt\nr.txt\ns.txt\n" {
		t.Errorf("in the clone: %q", got)
	}
	if got := d.mustSh(t, "cat worlds/w-"+c+"/diff; echo; cat worlds/w/diff"); got != "modified a.txt\nadded c.txt\nadded r.txt\nadded s.txt\n\n"+tDiff {
		t.Errorf("the clone's world's diff, then the source's:\n%s", got)
	}
	if got := guest("t", "ls /workspace"); got != "a.txt\nr.txt\ns.txt\n" {
		t.Errorf("the source after the clone: %q", got)
	}

	d.stop(syscall.SIGKILL)
	d.serve(t)
	var out string
	for i := 0; i < 120 && out != "one\n"; i++ {
		out, _ = d.sh(t, "echo 'cat /workspace/s.txt' > sandboxes/t/exec; cat sandboxes/t/exec")
		if out != "one\n" {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if out != "one\n" {
		t.Fatalf("after a daemon restart, /workspace/s.txt in the guest: %q", out)
	}
	if got := guest("t", "echo re > /workspace/re.txt; cat /workspace/re.txt"); got != "re\n" {
		t.Errorf("a write after the restart: %q", got)
	}
	if got := d.mustSh(t, "cat worlds/w/diff"); got != "modified a.txt\nadded r.txt\nadded re.txt\nadded s.txt\n" {
		t.Errorf("after the restart, diff: %q", got)
	}

	// Paused across a restart: /workspace is mounted again at resume.
	d.mustSh(t, "echo pause > sandboxes/t/ctl")
	if st := d.mustSh(t, "cat sandboxes/t/status"); !strings.HasPrefix(st, "t paused ") || !strings.Contains(st, " pid=0 ") {
		t.Errorf("t after pause: %q; want paused to disk (pid=0)", st)
	}
	d.stop(syscall.SIGTERM)
	d.serve(t)
	d.mustSh(t, "echo resume > sandboxes/t/ctl")
	if got := guest("t", "cat /workspace/re.txt; echo p > /workspace/p.txt; cat /workspace/p.txt"); got != "re\np\n" {
		t.Errorf("after a restart while paused and resume: %q", got)
	}
}
