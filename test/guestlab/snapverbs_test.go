package guestlab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSnapshotRollback (issue 11, the tree's snapshot verbs, real guests):
// a file on disk, a counter in guest memory (/dev/shm) and a sleeping
// process from before a snapshot are back after rollback, and what came
// after is gone; the first snapshot is a delta over the template's, the
// second a delta over the first; a snapshot outlives its
// killed and removed sandbox and seeds a new one with that state; bad
// input fails with errno and text in err and changes nothing.
func TestSnapshotRollback(t *testing.T) {
	need(t)
	d := startDaemon(t)
	d.mustSh(t, "echo 'new a' > ctl")
	d.waitAgent(t, "a")
	// fails runs a shell write that must fail, and returns the err file.
	fails := func(script, errFile string) string {
		t.Helper()
		if out, err := d.sh(t, script); err == nil {
			t.Errorf("%q succeeded (%q); want it refused", script, out)
		}
		return strings.TrimSpace(d.mustSh(t, "cat "+errFile))
	}
	info := func(snap string) string {
		t.Helper()
		return strings.TrimSpace(d.mustSh(t, "cat snapshots/"+snap+"/info"))
	}

	d.run(t, "a", "echo before > /root/file; sync; echo 41 > /dev/shm/counter; setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /dev/shm/pid")
	pid := d.run(t, "a", "cat /dev/shm/pid")
	d.mustSh(t, "echo snapshot s1 > sandboxes/a/ctl")
	if got := info("s1"); !strings.HasPrefix(got, "s1 sandbox=a parent=_base-") || !strings.HasSuffix(got, " kind=delta") {
		t.Errorf("s1 info %q; want a delta of a over its template's snapshot", got)
	}
	if st := d.mustSh(t, "cat sandboxes/a/ctl"); st != "a running\n" {
		t.Errorf("a after snapshot: %q; want running", st)
	}
	d.run(t, "a", "echo after > /root/file; touch /root/later; sync; echo 42 > /dev/shm/counter; kill "+pid+"; setsid sleep 200000 </dev/null >/dev/null 2>&1 & echo $! > /dev/shm/pid2")
	d.mustSh(t, "echo snapshot s2 > sandboxes/a/ctl")
	if got := info("s2"); !strings.HasPrefix(got, "s2 sandbox=a parent=s1 ") || !strings.HasSuffix(got, " kind=delta") {
		t.Errorf("s2 info %q; want a delta over s1", got)
	}
	t.Logf("snapshots: %s | %s", info("s1"), info("s2"))
	// The frozen layers were moved out of the VMM's work directory.
	if ents, err := os.ReadDir(filepath.Join(filepath.Dir(d.mnt), "st", "run", "a", "work", "snapdisk")); err != nil || len(ents) != 0 {
		t.Errorf("a's work/snapdisk: %v, %v; want empty", ents, err)
	}
	if ls := d.mustSh(t, "ls sandboxes/a/snapshots"); ls != "s1\ns2\n" {
		t.Errorf("ls sandboxes/a/snapshots = %q", ls)
	}

	// Bad input: errno, text, nothing changed.
	for _, tc := range []struct{ msg, want string }{
		{"rollback nosuch", `rollback: no snapshot "nosuch"`},
		{"snapshot Bad", `snapshot: invalid snapshot name "Bad"`},
		{"snapshot s1", `snapshot: snapshot exists "s1"`},
	} {
		if got := fails("echo '"+tc.msg+"' > sandboxes/a/ctl", "sandboxes/a/err"); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: err %q; want %q", tc.msg, got, tc.want)
		}
	}
	if got := d.run(t, "a", "cat /root/file /dev/shm/counter"); got != "after\n42" {
		t.Errorf("a after refused requests: %q; want after, 42", got)
	}

	d.mustSh(t, "echo rollback s1 > sandboxes/a/ctl")
	if got := d.run(t, "a", "cat /root/file /dev/shm/counter; ls /root/later /dev/shm/pid2 2>&1; true"); !strings.HasPrefix(got, "before\n41\n") ||
		strings.Contains(got, "\n/root/later") || strings.Contains(got, "\n/dev/shm/pid2") {
		t.Errorf("a after rollback s1: %q; want before, 41, no later files", got)
	}
	if got := d.run(t, "a", "cat /proc/"+pid+"/comm; hostname"); got != "sleep\na" {
		t.Errorf("a after rollback: pid %s is %q; want the sleep of before the snapshot, hostname a", pid, got)
	}
	if st := d.mustSh(t, "cat sandboxes/a/status"); !strings.HasPrefix(st, "a running ") || !strings.HasSuffix(st, " boot=restore\n") {
		t.Errorf("a status after rollback %q", st)
	}

	// The snapshot outlives its sandbox; a dead one cannot take one.
	d.mustSh(t, "echo kill a > ctl")
	if got := fails("echo snapshot s3 > sandboxes/a/ctl", "sandboxes/a/err"); got != `snapshot: sandbox "a" is dead; need running or paused` {
		t.Errorf("snapshot of a dead sandbox: err %q", got)
	}
	d.mustSh(t, "echo rm a > ctl")
	if got := fails("echo new b from=nosuch > ctl", "err"); got != `new: no snapshot "nosuch"` {
		t.Errorf("new from=nosuch: err %q", got)
	}
	d.mustSh(t, "echo new b from=s2 > ctl")
	if got := d.run(t, "b", "cat /root/file /dev/shm/counter; hostname; ls /root/later"); got != "after\n42\nb\n/root/later" {
		t.Errorf("b from s2: %q; want after, 42, b, /root/later", got)
	}
	if got := fails("echo rollback s1 > sandboxes/b/ctl", "sandboxes/b/err"); got != `rollback: snapshot "s1" is of sandbox "a", not "b"` {
		t.Errorf("rollback of b to a's snapshot: err %q", got)
	}
	if ls := d.mustSh(t, "ls snapshots"); ls != "s1\ns2\n" {
		t.Errorf("ls snapshots = %q; want s1 s2", ls)
	}
	// rm of s1, which s2 is a delta over: unlisted, kept for s2's chain
	// (docs/snapshots.md "Retention").
	d.mustSh(t, "echo rm > snapshots/s1/ctl")
	if ls := d.mustSh(t, "ls snapshots"); ls != "s2\n" {
		t.Errorf("ls snapshots after rm s1 = %q; want s2", ls)
	}
	d.mustSh(t, "echo new c from=s2 > ctl")
	if got := d.run(t, "c", "cat /root/file /dev/shm/counter"); got != "after\n42" {
		t.Errorf("c from s2 after rm s1: %q; want after, 42", got)
	}
	d.mustSh(t, "echo kill c > ctl; echo rm c > ctl")

	// clone: each clone has b's disk and memory, its own hostname, and
	// its own disk from then on.
	d.run(t, "b", "echo 43 > /dev/shm/counter")
	start := time.Now()
	ids := strings.Fields(d.mustSh(t, "exec 3<>sandboxes/b/ctl; echo clone 3 concurrency=2 >&3; cat <&3"))
	t.Logf("clone 3 concurrency=2: %v (snapshot and 3 restores to a serving agent)", time.Since(start).Round(time.Millisecond))
	if len(ids) != 3 {
		t.Fatalf("clone 3 replied %q; want 3 ids", ids)
	}
	for i, id := range ids {
		if got := d.run(t, id, "cat /root/file /dev/shm/counter; hostname"); got != "after\n43\n"+id {
			t.Errorf("clone %s: %q; want after, 43, %s", id, got, id)
		}
		d.run(t, id, "echo "+id+" > /root/own; sync")
		if i > 0 {
			if got := d.run(t, ids[0], "cat /root/own"); got != ids[0] {
				t.Errorf("clone %s reads %q in its /root/own; want its own", ids[0], got)
			}
		}
	}
	ls := strings.Fields(d.mustSh(t, "ls sandboxes/b/snapshots"))
	if len(ls) != 1 {
		t.Fatalf("b's snapshots after clone %q; want the clone's", ls)
	}
	if got := info(ls[0]); !strings.Contains(got, " sandbox=b parent=s2 ") || !strings.HasSuffix(got, " kind=delta") {
		t.Errorf("the clone's snapshot %q; want a delta of b over s2 (b was restored from it)", got)
	}
	for _, l := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(l, "snapshot taken") || strings.Contains(l, "restored from snapshot") || strings.Contains(l, "vmm started") {
			t.Log("daemon: " + l)
		}
	}
}
