package vmm

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"sandfs/snapshot"
	"sandfs/test/testenv"
)

// TestRAMFromChain maps a chain written from plain memory (no KVM) as
// guest RAM, and checks soft-dirty tracking after the restore sees
// exactly the pages written since arm.
func TestRAMFromChain(t *testing.T) {
	const size = 4 << 20
	store := t.TempDir()
	src := make([]byte, size)
	all := snapshot.NewPages(size / pageSize)
	for _, p := range []uint64{0, 1, 2, 100, 1000} {
		src[p*pageSize] = byte(p + 1)
		all.Set(p)
	}
	base, err := snapshot.Write(filepath.Join(store, "a"), src, all, nil, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	d := snapshot.NewPages(size / pageSize)
	for _, p := range []uint64{2, 500} {
		src[p*pageSize+1] = 0x77
		d.Set(p)
	}
	if _, err := snapshot.Write(filepath.Join(store, "b"), src, d, base, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	r := softDirtyMap(t, size, filepath.Join(store, "b", MemoryFile))
	if !bytes.Equal(r.mem, src) {
		t.Fatalf("RAM mapped from the chain differs from the memory it was taken of")
	}
	if r.maps != 3 || r.known.Count() != 6 {
		t.Errorf("maps %d, known pages %d; want 3, 6", r.maps, r.known.Count())
	}
	if err := r.arm(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []uint64{3, 100, 999} {
		r.mem[p*pageSize+5]++
	}
	_ = r.mem[7*pageSize] // a read is not a write
	if _, err := r.collect(nil, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := r.dirty.Runs(0)
	want := []snapshot.Run{{Page: 3, Count: 1}, {Page: 100, Count: 1}, {Page: 999, Count: 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("dirty after restore = %v; want %v", got, want)
	}
	// Re-armed by collect: nothing new is dirty.
	r.dirty.Clear()
	if _, err := r.collect(nil, true, nil, nil); err != nil || r.dirty.Count() != 0 {
		t.Errorf("second collect: %v, %d dirty pages; want none", err, r.dirty.Count())
	}
}

// TestCollectHeldPages: soft-dirty collect's one pagemap read gives a
// full snapshot of anonymous RAM the same pages present() reads.
func TestCollectHeldPages(t *testing.T) {
	r := softDirtyRAM(t, 4<<20)
	for _, p := range []uint64{0, 5, 6, 900} {
		r.mem[p*pageSize+9] = 1
	}
	held, err := r.collect(nil, true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.present()
	if err != nil {
		t.Fatal(err)
	}
	if held == nil || !slices.Equal(held, want) || !held.Has(900) {
		t.Errorf("pages collect held %v; present() reads %v", held.Runs(0), want.Runs(0))
	}
	full, err := r.fullPages(held)
	if err != nil || !slices.Equal(full, want) {
		t.Errorf("fullPages = %v, %v; want %v", full.Runs(0), err, want.Runs(0))
	}
}

// TestCollectRearm: on RAM of more than one pagemap chunk, collect holds
// the pages written and finds the pages dirtied since arm, at either
// side of a chunk's end and at RAM's ends; without a re-arm
// (SnapshotToEnd) the next collect finds them again.
func TestCollectRearm(t *testing.T) {
	const size = 258 << 20 // 66048 pages: three chunks of 32768
	r := softDirtyRAM(t, size)
	touched := []uint64{0, 63, 64, 900, 32767, 32768, 32831, 66047}
	for _, p := range touched {
		r.mem[p*pageSize+3] = 1
	}
	if err := r.arm(); err != nil {
		t.Fatal(err)
	}
	dirtied := []uint64{63, 32767, 32768, 66047}
	for _, p := range dirtied {
		r.mem[p*pageSize+4] = 2
	}
	held, err := r.collect(nil, false, nil, nil) // re-armed below
	if err != nil {
		t.Fatal(err)
	}
	one := snapshot.NewPages(size / pageSize)
	for _, p := range touched {
		one.Set(p)
	}
	if !slices.Equal(held, one) {
		t.Errorf("collect held %v; want the pages written, %v", held.Runs(0), one.Runs(0))
	}
	want := snapshot.NewPages(size / pageSize)
	for _, p := range dirtied {
		want.Set(p)
	}
	if !slices.Equal(r.dirty, want) {
		t.Errorf("dirty = %v; want %v", r.dirty.Runs(0), want.Runs(0))
	}
	// Without a re-arm (SnapshotToEnd) the same pages are found again, and
	// once more by the collect that re-arms; after that, none.
	for i, rearm := range []bool{false, true, true} {
		r.dirty.Clear()
		if _, err := r.collect(nil, rearm, nil, nil); err != nil {
			t.Fatal(err)
		}
		w := want
		if i == 2 {
			w = snapshot.NewPages(size / pageSize)
		}
		if !slices.Equal(r.dirty, w) {
			t.Errorf("collect %d (re-arm %v): dirty = %v; want %v", i+2, rearm, r.dirty.Runs(0), w.Runs(0))
		}
	}
}

// TestVMMWritesLogged: with the dirty log (which sees only the guest's
// writes), every page a device reports written (MarkDirty) counts as
// dirty, and a Slice alone (a read) does not.
func TestVMMWritesLogged(t *testing.T) {
	r, err := mapRAM(4<<20, "", procFiles{}, TrackDirtyLog)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if _, err := r.Slice(50*pageSize, 3*pageSize); err != nil {
		t.Fatal(err)
	}
	r.MarkDirty(3*pageSize+4000, 200) // pages 3 and 4
	r.MarkDirty(100*pageSize, 1)
	r.MarkDirty(1<<40, 4096) // not RAM: ignored
	got := r.vmmLog.Runs(0)
	want := []snapshot.Run{{Page: 3, Count: 2}, {Page: 100, Count: 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("VMM log after MarkDirty = %v; want %v", got, want)
	}
	if r.slotFlags() == 0 {
		t.Errorf("dirty-log RAM registers its slots without KVM_MEM_LOG_DIRTY_PAGES")
	}
}

// TestOneSoftDirtyMachine: clear_refs is process-wide, so a second
// machine in the process does not get soft-dirty tracking.
func TestOneSoftDirtyMachine(t *testing.T) {
	a := softDirtyRAM(t, 2<<20)
	b, err := mapRAM(2<<20, "", procFiles{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.tracking != TrackDirtyLog {
		t.Errorf("second machine tracks with %s; want %s", b.tracking, TrackDirtyLog)
	}
	b.close()
	if _, err := mapRAM(2<<20, "", procFiles{}, TrackSoftDirty); err == nil {
		t.Errorf("soft-dirty forced on a second machine was accepted")
	}
	a.close()
	c, err := mapRAM(2<<20, "", procFiles{}, TrackSoftDirty)
	if err != nil {
		t.Fatalf("after the first machine closed, the next cannot have soft-dirty: %v", err)
	}
	c.close()
}

// TestDefaultTracking: unless told, RAM tracks with soft-dirty where the
// kernel has PAGEMAP_SCAN (Linux 6.7) and with KVM's dirty log where the
// pagemap would have to be read whole (or soft-dirty is not there).
func TestDefaultTracking(t *testing.T) {
	sd, err := mapRAM(2<<20, "", procFiles{}, TrackSoftDirty)
	if err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatal(err)
	}
	softDirty := err == nil
	if softDirty {
		sd.close()
	}
	r, err := mapRAM(2<<20, "", procFiles{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	want := TrackDirtyLog
	if softDirty && testenv.KernelAtLeast(t, 6, 7) {
		want = TrackSoftDirty
	}
	if r.tracking != want {
		t.Errorf("default tracking %s (scan %d); want %s", r.tracking, r.scan, want)
	}
}

// softDirtyRAM maps anonymous RAM of size bytes that tracks with
// soft-dirty, closed with the test; without soft-dirty here the test is
// handed to the lab.
func softDirtyRAM(t testing.TB, size uint64) *guestRAM {
	t.Helper()
	return softDirtyMap(t, size, "")
}

// softDirtyMap is softDirtyRAM of RAM mapped from file ("" for fresh).
func softDirtyMap(t testing.TB, size uint64, file string) *guestRAM {
	t.Helper()
	r, err := mapRAM(size, file, procFiles{}, TrackSoftDirty)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		testenv.HandOff(t, false, "soft-dirty tracking (CONFIG_MEM_SOFT_DIRTY, /proc): "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	return r
}
