package vmm

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"sandfs/snapshot"
	"sandfs/test/testenv"
)

// TestScanMatchesRead: PAGEMAP_SCAN (Linux 6.7: the lab's kernel) finds
// the same held and soft-dirty pages as reading the pagemap, on RAM of
// more than one read chunk: pages written before arm (held, clean) and
// after (dirty), at either side of a chunk's end and at RAM's ends; and
// scanHeld uses it where it works.
func TestScanMatchesRead(t *testing.T) {
	const size = 258 << 20 // 66048 pages: three chunks of 32768
	r := softDirtyRAM(t, size)
	touched := []uint64{0, 1, 2, 63, 64, 900, 32767, 32768, 32831, 66046, 66047}
	for _, p := range touched {
		r.mem[p*pageSize+3] = 1
	}
	if err := r.arm(); err != nil {
		t.Fatal(err)
	}
	dirtied := []uint64{1, 63, 32767, 32768, 66047}
	for _, p := range dirtied {
		r.mem[p*pageSize+4] = 2
	}
	scan := func(by func(func(first, n uint64, softDirty bool)) error) (held, dirty snapshot.Pages, err error) {
		held, dirty = snapshot.NewPages(size/pageSize), snapshot.NewPages(size/pageSize)
		err = by(func(p, n uint64, d bool) {
			held.SetRange(p, n)
			if d {
				dirty.SetRange(p, n)
			}
		})
		return held, dirty, err
	}
	h1, d1, err := scan(r.scanByIoctl)
	if !testenv.KernelAtLeast(t, 6, 7) {
		// An older kernel has no PAGEMAP_SCAN: scanHeld reads the
		// pagemap (test/lab-packages-6.12 runs this on Linux 6.12).
		if !errors.Is(err, unix.ENOTTY) {
			t.Fatalf("PAGEMAP_SCAN before Linux 6.7: %v; want ENOTTY", err)
		}
		if _, err := r.present(); err != nil || r.scan != scanRead {
			t.Errorf("after a scan, scanHeld's way is %d (%v); want the pagemap read (%d)", r.scan, err, scanRead)
		}
		return
	}
	if err != nil {
		t.Fatalf("PAGEMAP_SCAN on Linux 6.7 or later: %v", err)
	}
	h2, d2, err := scan(r.scanByRead)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h1, h2) || !slices.Equal(d1, d2) {
		t.Errorf("PAGEMAP_SCAN: held %v, dirty %v; the pagemap read: held %v, dirty %v", h1.Runs(0), d1.Runs(0), h2.Runs(0), d2.Runs(0))
	}
	want := snapshot.NewPages(size / pageSize)
	for _, p := range touched {
		want.Set(p)
	}
	if !slices.Equal(h1, want) {
		t.Errorf("held %v; want %v", h1.Runs(0), want.Runs(0))
	}
	want.Clear()
	for _, p := range dirtied {
		want.Set(p)
	}
	if !slices.Equal(d1, want) {
		t.Errorf("soft-dirty %v; want %v", d1.Runs(0), want.Runs(0))
	}
	if _, err := r.present(); err != nil || r.scan != scanIoctl {
		t.Errorf("after a scan, scanHeld's way is %d (%v); want PAGEMAP_SCAN (%d)", r.scan, err, scanIoctl)
	}
}

// BenchmarkScan: finding the held and soft-dirty pages of a 2 GiB guest
// with 64 MiB of it held, a page every 128 KiB (so as many runs as
// pages: the ioctl's worst case), one in 16 of them dirtied after arm,
// by PAGEMAP_SCAN and by reading the pagemap. In the lab
// (docs/snapshots.md "PAGEMAP_SCAN in the lab"):
//
//	bin/sandfs lab -- sh -c 'cd /opt/sandfs/vmm && /opt/sandfs/bin/tests/vmm.test -test.run "^$" -test.bench BenchmarkScan'
func BenchmarkScan(b *testing.B) {
	const size = 2 << 30
	r := softDirtyRAM(b, size)
	const step = 128 << 10
	for p := uint64(0); p < size; p += step {
		r.mem[p] = 1
	}
	if err := r.arm(); err != nil {
		b.Fatal(err)
	}
	for p := uint64(0); p < size; p += 16 * step {
		r.mem[p] = 2
	}
	for _, m := range []struct {
		name string
		by   func(func(first, n uint64, softDirty bool)) error
	}{{"ioctl", r.scanByIoctl}, {"read", r.scanByRead}} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				held := 0
				if err := m.by(func(_, n uint64, _ bool) { held += int(n) }); err != nil {
					b.Skipf("%v (PAGEMAP_SCAN is Linux 6.7's)", err)
				}
				if held == 0 {
					b.Fatal("no held pages")
				}
			}
		})
	}
}

// TestPagemapScanRequest: the request number derived from pmScanArg is
// the kernel header's (its size is the ABI's 96 bytes).
func TestPagemapScanRequest(t *testing.T) {
	if PagemapScanIoctl != 0xc0606610 {
		t.Errorf("PAGEMAP_SCAN = %#x; want 0xc0606610 (struct pm_scan_arg of 96 bytes)", PagemapScanIoctl)
	}
}
