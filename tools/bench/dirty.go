package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"sandfs/snapshot"
)

// dirtyResult is one snapshot taken after the guest dirtied mib MiB.
type dirtyResult struct {
	mib      int
	pages    uint64        // pages the delta holds
	runs     int           // runs of pages (one mapping each at restore)
	snap     time.Duration // pause + snapshot + resume
	verb     time.Duration // the snapshot verb alone (machine paused)
	dd       time.Duration // dd writing as many bytes (whole MiB) to the same file system
	ddBytes  int64
	fullSnap bool
	phases   string // the VMM's breakdown of the verb (snapshot.Timing)
}

// benchDirty restores t (whose RAM must hold the largest size and a
// quarter more: the guest's /dev/shm is made 75% of it), then for each size has the guest write
// that many MiB of random bytes to a file of /dev/shm and takes a delta
// snapshot over the previous one, timed against dd of the same bytes.
func (r *run) benchDirty(ctx context.Context, t *template, sizes []int) ([]dirtyResult, error) {
	s, _, err := r.h.restore(ctx, t.dir, t.mem, t.snap())
	if err != nil {
		return nil, err
	}
	defer s.close()
	parent := t.snap()
	var out []dirtyResult
	// A first, unmeasured round: the delta holds what the restore and
	// the agent's first exec touched, and dd's first run pays for
	// loading dd.
	if err := guestSh(ctx, s.cfg.Vsock.UDS, "mount -o remount,size=75% /dev/shm"); err != nil {
		return nil, fmt.Errorf("making /dev/shm 75%% of RAM: %w", err)
	}
	for i, n := range append([]int{0}, sizes...) {
		cmd := "rm -f /dev/shm/x; head -c " + strconv.Itoa(n<<20) + " /dev/urandom > /dev/shm/x"
		if err := guestSh(ctx, s.cfg.Vsock.UDS, cmd); err != nil {
			return nil, err
		}
		dir := filepath.Join(t.store, "d"+strconv.FormatInt(r.h.seq.Add(1), 10))
		res := dirtyResult{mib: n}
		start := now()
		if err := s.p.Pause(ctx); err != nil {
			return nil, err
		}
		vs := now()
		if err := s.p.Snapshot(ctx, dir, parent); err != nil {
			return nil, fmt.Errorf("snapshot %d over %s: %w", i, parent, err)
		}
		res.verb = since(vs)
		if err := s.p.Resume(ctx); err != nil {
			return nil, err
		}
		res.snap = since(start)
		res.phases = s.snapshotPhases(dir)
		sn, err := snapshot.Open(dir)
		if err != nil {
			return nil, err
		}
		res.pages, res.runs, res.fullSnap = sn.Pages(), len(sn.Runs), sn.Full()
		res.ddBytes = int64((res.pages*snapshot.PageSize + 1<<20 - 1) >> 20 << 20)
		if res.dd, err = ddTime(filepath.Join(t.store, "dd.tmp"), res.ddBytes>>20); err != nil {
			return nil, err
		}
		parent = dir
		if i == 0 {
			continue
		}
		r.progress("  dirtied %d MiB: delta %s in %d runs, snapshot %s (verb %s: %s), dd %s of %s", n,
			mib(int64(res.pages*snapshot.PageSize)), res.runs, ms(res.snap), ms(res.verb), res.phases, ms(res.dd), mib(res.ddBytes))
		out = append(out, res)
	}
	return out, nil
}

// ddTime is the wall time of `dd if=/dev/zero of=file bs=1M count=n
// conv=fsync`; file is removed after.
func ddTime(file string, n int64) (time.Duration, error) {
	defer os.Remove(file)
	cmd := exec.Command("dd", "if=/dev/zero", "of="+file, "bs=1M", "count="+strconv.FormatInt(n, 10), "conv=fsync")
	start := now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("dd: %v: %s", err, out)
	}
	return since(start), nil
}

// dirtyTable is the snapshot-vs-dirty-size table.
func dirtyTable(rs []dirtyResult, fs string) *table {
	t := &table{title: "Snapshot vs dirty size (VMM process, delta over the previous snapshot)",
		head: []string{"guest dirtied", "delta written", "runs", "snapshot: pause + write + resume", "snapshot verb alone", "dd of the same MiB, conv=fsync", "**snapshot / dd**", "inside the verb (VMM's log)"}}
	for _, r := range rs {
		w := mib(int64(r.pages * snapshot.PageSize))
		if r.fullSnap {
			w += " (written full)"
		}
		t.add(fmt.Sprintf("%d MiB", r.mib), w, strconv.Itoa(r.runs), ms(r.snap), ms(r.verb), ms(r.dd)+" ("+mib(r.ddBytes)+")", "**"+ratio(r.snap, r.dd)+"**", r.phases)
	}
	t.notes = append(t.notes, "Snapshots and dd write to the same file system ("+fs+"). The guest writes random bytes to a file in its /dev/shm (tmpfs) with head -c N /dev/urandom; the delta also holds what the exec itself touched (agent, page tables), hence the overhead at 0 MiB. dd writes whole MiB, at least 1.")
	return t
}
