package guestlab

import (
	"bytes"
	"fmt"
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
// from their source from then on.
func TestClones(t *testing.T) {
	need(t)
	// Eleven uids: the source and ten clones.
	d := startDaemon(t, "--vmm-uids", "1879100000-1879100010")
	pid := d.cloneSource(t)
	start := time.Now()
	ids := d.clone(t, "a", "clone 10 concurrency=4", 10)
	t.Logf("clone 10 concurrency=4: %v (a snapshot and 10 restores to a serving agent)", time.Since(start).Round(time.Millisecond))
	for _, id := range ids {
		if got, want := d.run(t, id, "cat /root/file /dev/shm/counter /proc/"+pid+"/comm; hostname"), "from-a\n7\nsleep\n"+id; got != want {
			t.Errorf("clone %s: %q; want %q", id, got, want)
		}
		d.run(t, id, "echo "+id+" > /root/own; echo "+id+" > /dev/shm/own; sync")
	}
	d.run(t, "a", "echo a > /dev/shm/own")
	for _, id := range append([]string{"a"}, ids...) {
		want := id + "\n" + id
		if id == "a" {
			want = "a\nno own file"
		}
		if got := d.run(t, id, "cat /dev/shm/own; cat /root/own 2>/dev/null || echo no own file"); got != want {
			t.Errorf("%s after every clone wrote its own: %q; want %q", id, got, want)
		}
	}
}

// TestCloneFailsHalfway (issue 11): a clone that fails half-way, the
// daemon's VMM uids running out at its fourth sandbox after three have
// started real VMMs, leaves nothing behind: the sandboxes, snapshots,
// run directories, snapshot store and VMM processes are what they were,
// and the three uids it took are free again (a clone of three then
// works). Its own daemon with four uids: few guests run at once.
func TestCloneFailsHalfway(t *testing.T) {
	need(t)
	d := startDaemon(t, "--vmm-uids", "1879100020-1879100023")
	d.cloneSource(t)
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
	if l := d.log.String(); strings.Contains(l, "cannot remove") {
		t.Errorf("the failed clone's clean-up logged a failure: %s", l)
	}
	if got := d.run(t, "a", "cat /root/file /dev/shm/counter"); got != "from-a\n7" {
		t.Errorf("a after the failed clone: %q", got)
	}
	more := d.clone(t, "a", "clone 3", 3) // the failed clone's uids are free again
	if got := d.run(t, more[2], "cat /root/file; hostname"); got != "from-a\n"+more[2] {
		t.Errorf("clone %s: %q", more[2], got)
	}
}

// cloneSource makes sandbox a with a file, a /dev/shm counter and a
// sleeping process, and returns the process's pid.
func (d *daemon) cloneSource(t *testing.T) string {
	t.Helper()
	d.mustSh(t, "echo 'new a' > ctl")
	d.waitAgent(t, "a")
	d.run(t, "a", "echo from-a > /root/file; sync; echo 7 > /dev/shm/counter; setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /dev/shm/pid")
	return d.run(t, "a", "cat /dev/shm/pid")
}

// clone writes verb (a clone) to sandbox id's ctl and returns the ids
// it replied, which must be n; if not, the test ends with the write's
// error and the sandbox's err file (where the daemon names a lab fault
// that ended a clone's guest, for the lab's runner to see).
func (d *daemon) clone(t *testing.T, id, verb string, n int) []string {
	t.Helper()
	out, err := d.sh(t, "exec 3<>sandboxes/"+id+"/ctl; echo '"+verb+"' >&3 && cat <&3")
	if ids := strings.Fields(out); err == nil && len(ids) == n {
		return ids
	}
	e, _ := d.sh(t, "cat sandboxes/"+id+"/err")
	t.Fatalf("%s: replied %q, %v; want %d ids; err: %s", verb, out, err, n, e)
	return nil
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
			// A template's snapshot, linked into the store by the
			// first snapshot over it, stays with the template cache
			// (docs/snapshots.md), as checkStore allows.
			if dir == "snapshots" && strings.HasPrefix(e.Name(), "_") {
				continue
			}
			b.WriteString(" " + e.Name())
		}
	}
	fmt.Fprintf(&b, "\nVMMs: %v", d.vmms())
	return b.String()
}

// vmms lists the pids of the daemon's VMM processes (found by the run
// directory on their command line), in order.
func (d *daemon) vmms() []int {
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
	return pids
}
