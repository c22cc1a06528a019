package guestlab

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClones (issue 11): ten clones of a sandbox each have its disk
// (a file), its memory (a /dev/shm counter) and its processes (a
// sleep), each its own hostname, and are isolated from each other and
// from their source from then on. Then a clone that fails half-way, the
// daemon's VMM uids running out at its fourth sandbox after three have
// started, leaves nothing behind: the sandboxes, snapshots, run
// directories, snapshot store and VMM processes are what they were, and
// the three uids it took are free again (a clone of three then works).
func TestClones(t *testing.T) {
	need(t)
	// Eleven uids: the source and ten clones.
	d := startDaemon(t, "--vmm-uids", "1879100000-1879100010")
	run := func(id, cmd string) string {
		t.Helper()
		return strings.TrimSpace(d.mustSh(t, "cd sandboxes/"+id+" && echo '"+cmd+"' > exec && cat exec"))
	}
	d.mustSh(t, "echo 'new a' > ctl")
	d.waitAgent(t, "a")
	run("a", "echo from-a > /root/file; sync; echo 7 > /dev/shm/counter; setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /dev/shm/pid")
	pid := run("a", "cat /dev/shm/pid")

	start := time.Now()
	ids := strings.Fields(d.mustSh(t, "exec 3<>sandboxes/a/ctl; echo clone 10 concurrency=4 >&3; cat <&3"))
	t.Logf("clone 10 concurrency=4: %v (a snapshot and 10 restores to a serving agent)", time.Since(start).Round(time.Millisecond))
	if len(ids) != 10 {
		t.Fatalf("clone 10 replied %q; want 10 ids", ids)
	}
	for _, id := range ids {
		if got, want := run(id, "cat /root/file /dev/shm/counter /proc/"+pid+"/comm; hostname"), "from-a\n7\nsleep\n"+id; got != want {
			t.Errorf("clone %s: %q; want %q", id, got, want)
		}
		run(id, "echo "+id+" > /root/own; echo "+id+" > /dev/shm/own; sync")
	}
	run("a", "echo a > /dev/shm/own")
	for _, id := range append([]string{"a"}, ids...) {
		want := id + "\n" + id
		if id == "a" {
			want = "a\nno own file"
		}
		if got := run(id, "cat /dev/shm/own; cat /root/own 2>/dev/null || echo no own file"); got != want {
			t.Errorf("%s after every clone wrote its own: %q; want %q", id, got, want)
		}
	}

	// Three uids free again, then a clone of five: three start, the
	// fourth finds no uid.
	for _, id := range ids[7:] {
		d.mustSh(t, "echo 'kill "+id+"' > ctl; echo 'rm "+id+"' > ctl")
	}
	before := d.cloneState(t)
	_, err := d.sh(t, "echo 'clone 5 concurrency=1' > sandboxes/a/ctl")
	if err == nil || !strings.Contains(err.Error(), "No space left on device") {
		t.Errorf("clone 5 with 3 uids free: %v; want ENOSPC", err)
	}
	e := d.mustSh(t, "cat sandboxes/a/err")
	if !strings.HasPrefix(e, "clone: clone 4 of 5: ") || !strings.Contains(e, "no free uid") || !strings.Contains(e, "are removed") {
		t.Errorf("err after the failed clone: %q; want clone 4 of 5, no free uid, every clone removed", e)
	}
	t.Logf("the failed clone: %s", strings.TrimSpace(e))
	if after := d.cloneState(t); after != before {
		t.Errorf("after a clone that failed half-way:\n%s\nbefore it:\n%s", after, before)
	}
	if got := run("a", "cat /root/file /dev/shm/counter"); got != "from-a\n7" {
		t.Errorf("a after the failed clone: %q", got)
	}
	more := strings.Fields(d.mustSh(t, "exec 3<>sandboxes/a/ctl; echo clone 3 >&3; cat <&3"))
	if len(more) != 3 {
		t.Fatalf("clone 3 after the failed clone replied %q; want 3 ids (its uids freed)", more)
	}
	if got := run(more[2], "cat /root/file; hostname"); got != "from-a\n"+more[2] {
		t.Errorf("clone %s: %q", more[2], got)
	}
}

// cloneState is what a failed clone must leave as it was: the listed
// sandboxes and snapshots, the run directories and snapshot store on
// disk, and the daemon's VMM processes.
func (d *daemon) cloneState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("sandboxes: " + strings.Join(strings.Fields(d.mustSh(t, "ls sandboxes")), " "))
	b.WriteString("\nsnapshots: " + strings.Join(strings.Fields(d.mustSh(t, "ls snapshots sandboxes/a/snapshots")), " "))
	for _, dir := range []string{"run", "snapshots"} {
		ents, err := os.ReadDir(filepath.Join(d.dir, "st", dir))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("\nst/" + dir + ":")
		for _, e := range ents {
			b.WriteString(" " + e.Name())
		}
	}
	b.WriteString("\nVMMs: " + strings.Join(d.vmms(), " "))
	return b.String()
}

// vmms lists the pids of the daemon's VMM processes (found by the run
// directory on their command line), in order.
func (d *daemon) vmms() []string {
	runs := []byte(filepath.Join(d.dir, "st", "run") + "/")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, runs) && bytes.Contains(b, []byte("vmm.sock.json")) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	slices.Sort(pids)
	out := make([]string, len(pids))
	for i, p := range pids {
		out[i] = strconv.Itoa(p)
	}
	return out
}
