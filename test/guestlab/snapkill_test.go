package guestlab

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillDuringSnapshot (issue 11, real guests): the daemon is killed
// (SIGKILL) at a random moment of a snapshot or a rollback of a sandbox,
// SANDFS_TEST_SNAPKILL_N times (default 6: each round costs a daemon
// restart in the lab; the 20 with SANDFS_TEST_SNAPKILL_N=20).
// Before each operation its guest writes a marker of the round to its
// disk and its memory. After each restart no snapshot is half there (the
// store holds only listed snapshots, their parents and template
// snapshots), and at the end every listed snapshot restores (new from=)
// with the marker of the round that took it, on disk and in memory.
func TestKillDuringSnapshot(t *testing.T) {
	need(t)
	rounds := 6
	if v, err := strconv.Atoi(os.Getenv("SANDFS_TEST_SNAPKILL_N")); err == nil && v > 0 {
		rounds = v
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 11))
	d := startDaemon(t)
	marker := map[string]string{} // snapshot → the marker of the round that took it
	store := filepath.Join(d.dir, "st", "snapshots")
	// Round 0, not killed: how long a snapshot takes here (the kills
	// fall anywhere in 0-1.5 times that, so some land before it is
	// listed, some after).
	a := "a0"
	d.mustSh(t, "echo 'new "+a+"' > ctl")
	d.waitAgent(t, a)
	d.run(t, a, "echo m0 > /root/m; echo m0 > /dev/shm/m; sync")
	start := time.Now()
	d.mustSh(t, "echo 'snapshot s0' > sandboxes/"+a+"/ctl")
	took := time.Since(start)
	marker["s0"] = "m0"
	t.Logf("round 0: snapshot s0 took %v", took)
	for i := 1; i <= rounds; i++ {
		a = d.ensureRunning(t, a, "a"+strconv.Itoa(i))
		m := "m" + strconv.Itoa(i)
		d.run(t, a, "echo "+m+" > /root/m; echo "+m+" > /dev/shm/m; sync")
		op, snap := "snapshot s"+strconv.Itoa(i), "s"+strconv.Itoa(i)
		if listed := d.snapshotsOf(t, a); len(listed) > 0 && rng.IntN(2) == 0 {
			op, snap = "rollback "+listed[rng.IntN(len(listed))], ""
		}
		w := exec.Command("sh", "-c", "echo '"+op+"' > sandboxes/"+a+"/ctl")
		w.Dir = d.mnt
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(rng.Int64N(int64(took) * 3 / 2))
		time.Sleep(delay)
		d.stop(syscall.SIGKILL)
		werr := w.Wait()
		d.serve(t)
		listed := d.snapshotsOf(t, "")
		t.Logf("round %d: %s, daemon killed after %v (write: %v); listed %v", i, op, delay, werr, listed)
		if snap != "" && contains(listed, snap) {
			marker[snap] = m
		}
		d.checkStore(t, store, listed)
	}
	listed := d.snapshotsOf(t, "")
	if len(listed) == 0 {
		t.Fatalf("no snapshot survived %d rounds; want some (the daemon was killed too early every time?)", rounds)
	}
	for i, s := range listed {
		id := "r" + strconv.Itoa(i)
		d.mustSh(t, "echo 'new "+id+" from="+s+"' > ctl")
		want, ok := marker[s]
		got := d.run(t, id, "cat /root/m /dev/shm/m")
		if ok && got != want+"\n"+want {
			t.Errorf("%s restored from %s: markers %q; want %s twice", id, s, got, want)
		}
		t.Logf("%s: restored, markers %q", s, got)
		d.mustSh(t, "echo 'kill "+id+"' > ctl; echo 'rm "+id+"' > ctl")
	}
}

// ensureRunning returns a running sandbox: id as it is, or resumed, or,
// when a kill left it dead, a new one named next (a fresh name: the
// kernel's FUSE cache may still hold the dead one's nodes).
func (d *daemon) ensureRunning(t *testing.T, id, next string) string {
	t.Helper()
	st, _ := d.sh(t, "cut -d' ' -f2 sandboxes/"+id+"/status")
	switch strings.TrimSpace(st) {
	case "running":
		return id
	case "paused":
		d.mustSh(t, "echo resume > sandboxes/"+id+"/ctl")
		return id
	}
	d.mustSh(t, "echo 'new "+next+"' > ctl")
	d.waitAgent(t, next)
	return next
}

// snapshotsOf lists the snapshots of sandbox id ("": all).
func (d *daemon) snapshotsOf(t *testing.T, id string) []string {
	t.Helper()
	dir := "snapshots"
	if id != "" {
		dir = "sandboxes/" + id + "/snapshots"
	}
	return strings.Fields(d.mustSh(t, "ls "+dir))
}

// checkStore checks the snapshot store after a restart: every listed
// snapshot's info reads, and the store holds nothing else but their
// (removed, kept) parents and template snapshots: no half-written or
// half-removed snapshot.
func (d *daemon) checkStore(t *testing.T, store string, listed []string) {
	t.Helper()
	for _, s := range listed {
		if _, err := d.sh(t, "cat snapshots/"+s+"/info"); err != nil {
			t.Errorf("listed snapshot %s: info: %v", s, err)
		}
	}
	ents, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "_") || contains(listed, n) {
			continue
		}
		t.Errorf("snapshot store holds %q, not listed (listed: %v)", n, listed)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
