package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/snapshot"
	"sandfs/test/testenv"
	"sandfs/vmm/testguest"
)

// dirtyGuest is a machine running testguest's "dirty" mode.
type dirtyGuest struct {
	t   *testing.T
	m   *Machine
	con *console
}

func newDirtyGuest(t *testing.T, mem uint64, tracking, snap string) *dirtyGuest {
	t.Helper()
	testenv.NeedGuests(t)
	g := &dirtyGuest{t: t, con: &console{}}
	cfg := MachineConfig{MemBytes: mem, CPUs: 1, Cmdline: "quiet " + testguest.Mode + "=dirty",
		Console: g.con, Tracking: tracking}
	if snap == "" {
		k, err := os.ReadFile(testguest.Kernel(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Kernel, cfg.Initrd = k, testguest.Initrd(t)
	} else {
		cfg.MemFile = filepath.Join(snap, MemoryFile)
	}
	m, err := NewMachine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	g.m = m
	if snap == "" {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		g.con.waitFor(t, m, "DIRTY-READY", bootTimeout)
	}
	return g
}

// cmd sends a console command and waits for the line answering it.
func (g *dirtyGuest) cmd(line, answer string) string {
	g.t.Helper()
	n := len(g.con.String())
	if got := g.m.Serial().Input([]byte(line + "\n")); got != len(line)+1 {
		g.t.Fatalf("console took %d of %d bytes", got, len(line)+1)
	}
	re := regexp.MustCompile(answer + `[^\r\n]*\r?\n`)
	deadline := time.Now().Add(bootTimeout)
	for time.Now().Before(deadline) {
		if s := re.FindString(g.con.String()[n:]); s != "" {
			return strings.TrimSpace(s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.t.Fatalf("no %q after %q; vCPUs:\n%s\nconsole:\n%s", answer, line, stallReport(g.m), tail(g.con.String(), 2000))
	return ""
}

// snap pauses the guest, snapshots it at store/id over parent ("" full)
// and resumes it.
func (g *dirtyGuest) snap(store, id, parent string) *snapshot.Snapshot {
	g.t.Helper()
	if err := g.m.Pause(); err != nil {
		g.t.Fatal(err)
	}
	if parent != "" {
		parent = filepath.Join(store, parent)
	}
	start := time.Now()
	s, err := g.m.Snapshot(filepath.Join(store, id), parent)
	if err != nil {
		g.t.Fatal(err)
	}
	took := time.Since(start)
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(s.Dir, snapshot.MemFile), &st)
	g.t.Logf("snapshot %s (%s, over %q): %d pages, %d data bytes, %d allocated, %d runs, %v",
		id, g.m.DirtyTracking(), s.Parent, s.Pages(), s.DataBytes, st.Blocks*512, len(s.Runs), took)
	if err := g.m.Resume(); err != nil {
		g.t.Fatal(err)
	}
	return s
}

// TestSnapshotChain, with each tracking mechanism: a guest that dirties N
// MiB gets a delta of about N MiB (bytes measured); a chain of a full
// snapshot and 3 deltas restores with the guest's memory as it was at
// the last one; a delta over an ancestor of the last snapshot folds in
// the ones between; and the first delta after the restore is small again.
func TestSnapshotChain(t *testing.T) {
	for _, tracking := range []string{TrackSoftDirty, TrackDirtyLog} {
		t.Run(tracking, func(t *testing.T) { testSnapshotChain(t, tracking) })
	}
}

func testSnapshotChain(t *testing.T, tracking string) {
	store := t.TempDir()
	g := newDirtyGuest(t, 256<<20, tracking, "")
	if got := g.m.DirtyTracking(); got != tracking {
		t.Fatalf("DirtyTracking = %s; want %s", got, tracking)
	}
	g.cmd("fill 0 4 1", "FILLED 1")
	full := g.snap(store, "s0", "")
	if !full.Full() {
		t.Fatalf("first snapshot is a delta")
	}
	idle := g.snap(store, "s1", "s0")
	d24 := func(id, parent, fill string, mib uint64, seed int) *snapshot.Snapshot {
		g.cmd(fill, fmt.Sprintf("FILLED %d", seed))
		s := g.snap(store, id, parent)
		lo, hi := mib<<20, mib<<20+idle.DataBytes+4<<20
		if s.Full() || s.DataBytes < lo || s.DataBytes > hi {
			t.Errorf("%s after dirtying %d MiB: %d bytes (full %v); want %d..%d", id, mib, s.DataBytes, s.Full(), lo, hi)
		}
		return s
	}
	d24("s2", "s1", "fill 4 24 2", 24, 2)
	sum := g.cmd("sum", "SUM ")
	d24("s3", "s2", "fill 20 8 3", 8, 3)
	sum3 := g.cmd("sum", "SUM ")
	if sum3 == sum {
		t.Fatalf("the buffer's sum did not change with a fill")
	}
	if err := g.m.Pause(); err != nil { // nothing changes from here
		t.Fatal(err)
	}
	// A delta over an ancestor of the last snapshot (s1) folds in the
	// pages of the snapshots between: it holds at least the 24 MiB s2
	// and s3 wrote (4..28 MiB of the buffer).
	x, err := g.m.Snapshot(filepath.Join(store, "x"), filepath.Join(store, "s1"))
	if err != nil {
		t.Errorf("a delta over s1 (an ancestor of the last snapshot): %v", err)
	} else if x.Full() || x.ParentSum != idle.Sum || x.DataBytes < 24<<20 {
		t.Errorf("delta over s1 after s3: full %v, parent sum %x (s1's %x), %d bytes; want a delta over s1 with at least 24 MiB",
			x.Full(), x.ParentSum, idle.Sum, x.DataBytes)
	}
	g.m.Close()

	// Restore s3 = s0 + s1 + s2 + s3.
	st, err := LoadState(filepath.Join(store, "s3"))
	if err != nil {
		t.Fatal(err)
	}
	r := newDirtyGuest(t, 256<<20, tracking, filepath.Join(store, "s3"))
	if err := r.m.Restore(st); err != nil {
		t.Fatal(err)
	}
	ms, err := r.m.MemoryStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored chain of 4: %+v", ms)
	if err := r.m.Resume(); err != nil {
		t.Fatal(err)
	}
	if got := r.cmd("sum", "SUM "); got != sum3 {
		t.Errorf("restored chain: %s; want %s (as at s3)", got, sum3)
	}
	g = r
	d24("s4", "s3", "fill 40 4 4", 4, 4)
}

// TestRestoreFlat: restoring a 2 GiB machine maps as many pages, with as
// many mappings, as a 128 MiB one (mechanism, not timing; times logged).
func TestRestoreFlat(t *testing.T) {
	type result struct {
		stats MemoryStats
		took  time.Duration
	}
	var res []result
	for _, mem := range []uint64{128 << 20, 2 << 30} {
		store := t.TempDir()
		g := newDirtyGuest(t, mem, "", "")
		g.cmd("fill 0 8 1", "FILLED 1")
		sum := g.cmd("sum", "SUM ")
		s := g.snap(store, "s", "")
		g.m.Close()
		start := time.Now()
		st, err := LoadState(s.Dir)
		if err != nil {
			t.Fatal(err)
		}
		r := newDirtyGuest(t, mem, "", s.Dir)
		if err := r.m.Restore(st); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		ms, err := r.m.MemoryStats()
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, result{ms, took})
		t.Logf("%d MiB: restore %v, %+v", mem>>20, took, ms)
		if err := r.m.Resume(); err != nil {
			t.Fatal(err)
		}
		if got := r.cmd("sum", "SUM "); got != sum {
			t.Errorf("%d MiB restored: %s; want %s", mem>>20, got, sum)
		}
		r.m.Close()
	}
	// Resident pages are counted within the kernel's fault-around
	// (fault_around_bytes, 64 KiB: 16 pages), which maps whatever of the
	// file's neighbourhood the page cache holds and so varies by a page or
	// two between runs whatever the size; growth with memory size would be
	// thousands of pages (2 GiB is 16 times 128 MiB).
	const faultAround = 16
	a, b := res[0].stats, res[1].stats
	if a.Maps != b.Maps || b.Resident > a.Resident+faultAround || a.Resident > b.Resident+faultAround {
		t.Errorf("restore mapped %d mappings, %d pages at 128 MiB and %d, %d at 2 GiB; want the same mappings and pages within %d",
			a.Maps, a.Resident, b.Maps, b.Resident, faultAround)
	}
}

// TestSnapshotCompaction: once a chain is snapshot.CompactDepth long, the
// next snapshot over it is written full, and both it and the longest
// chain restore with the guest's memory as it was.
func TestSnapshotCompaction(t *testing.T) {
	store := t.TempDir()
	g := newDirtyGuest(t, 256<<20, "", "")
	g.snap(store, "s0", "")
	sums := map[string]string{}
	var last *snapshot.Snapshot
	for i := 1; i <= snapshot.CompactDepth; i++ {
		g.cmd(fmt.Sprintf("fill %d 1 %d", i, i+100), fmt.Sprintf("FILLED %d", i+100))
		sums[fmt.Sprint("s", i)] = g.cmd("sum", "SUM ")
		last = g.snap(store, fmt.Sprint("s", i), fmt.Sprint("s", i-1))
		if want := i == snapshot.CompactDepth; last.Full() != want {
			t.Fatalf("s%d over a chain of %d: full %v; want %v", i, i, last.Full(), want)
		}
	}
	g.m.Close()
	for _, id := range []string{fmt.Sprint("s", snapshot.CompactDepth-1), last.ID} {
		st, err := LoadState(filepath.Join(store, id))
		if err != nil {
			t.Fatal(err)
		}
		r := newDirtyGuest(t, 256<<20, "", filepath.Join(store, id))
		if err := r.m.Restore(st); err != nil {
			t.Fatal(err)
		}
		ms, _ := r.m.MemoryStats()
		t.Logf("restore %s: %+v", id, ms)
		if err := r.m.Resume(); err != nil {
			t.Fatal(err)
		}
		if got := r.cmd("sum", "SUM "); got != sums[id] {
			t.Errorf("restored %s: %s; want %s", id, got, sums[id])
		}
		r.m.Close()
	}
}
