package vmm

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Finding the pages of RAM that hold data, and which of them are
// soft-dirty. Reading /proc/self/pagemap costs 8 bytes and a page-table
// step for every page of RAM, held or not: 12-27 ms for a 2 GiB guest in
// the lab, most of a snapshot of an idle one. Linux 6.7 answers the
// same question with the PAGEMAP_SCAN ioctl on the pagemap file: runs of
// pages whose categories match, skipping what matches nothing. The VMM
// uses the ioctl where the kernel has it (found out when RAM is mapped,
// findScan, or at the first scan, by its answer) and reads the pagemap
// elsewhere; both give the same runs (TestScanMatchesRead). Where it must
// read, a machine tracks dirty pages with KVM's dirty log instead of
// soft-dirty (mapRAM), so the read is left to full snapshots.

// PAGEMAP_SCAN (include/uapi/linux/fs.h): _IOWR('f', 16, struct
// pm_scan_arg) (0xc0606610), and the page categories the VMM asks about.
const (
	// PagemapScanIoctl is the request; the seccomp filter allows it
	// (vmm/vmmproc/seccomp.go).
	PagemapScanIoctl = 3<<30 | unsafe.Sizeof(pmScanArg{})<<16 | 'f'<<8 | 16
	pageIsPresent    = 1 << 3
	pageIsSwapped    = 1 << 4
	pageIsSoftDirty  = 1 << 7
	// scanRegions bounds the runs one ioctl returns (24 bytes each, in a
	// buffer kept with the RAM); the next call goes on from where the
	// kernel stopped.
	scanRegions = 4096
)

// pmScanArg is struct pm_scan_arg.
type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages       uint64
	categoryInverted, categoryMask, categoryAnyofMask, returnMask uint64
}

// pageRegion is struct page_region: pages [start, end) (addresses) with
// categories.
type pageRegion struct{ start, end, categories uint64 }

// How a guestRAM finds its held pages: not known before its first scan.
const (
	scanUnknown = iota
	scanIoctl
	scanRead
)

// scanHeld calls f for each run of pages of RAM that hold data (present
// or swapped): its first page, its length and whether its pages are
// soft-dirty. With Machine.ctl held.
func (r *guestRAM) scanHeld(f func(first, n uint64, softDirty bool)) error {
	switch r.scan {
	case scanIoctl:
		return r.scanByIoctl(f)
	case scanRead:
		return r.scanByRead(f)
	}
	err := r.scanByIoctl(f)
	switch {
	case err == nil:
		r.scan = scanIoctl
		return nil
	case errors.Is(err, unix.ENOTTY):
		r.scan = scanRead
		return r.scanByRead(f)
	}
	return err // known at the next scan
}

// findScan settles how scanHeld will find held pages, by asking
// PAGEMAP_SCAN about RAM's first page: scanIoctl if the kernel answers,
// scanRead if it has no such ioctl (ENOTTY) or there is no pagemap, and
// scanUnknown on another error (the first scan tries again).
func (r *guestRAM) findScan() int {
	if r.scan != scanUnknown {
		return r.scan
	}
	if r.pagemap == nil {
		return scanRead // scanHeld's ioctl answers ENOTTY
	}
	base := uint64(uintptrOf(r.mem))
	_, _, e := pagemapScan(r.pagemap, base, base+pageSize, make([]pageRegion, 1))
	switch e {
	case 0:
		r.scan = scanIoctl
	case unix.ENOTTY:
		r.scan = scanRead
	}
	return r.scan
}

// pagemapScan asks PAGEMAP_SCAN for the runs of held pages (present or
// swapped, with their soft-dirty bit) in [start, end), at most len(vec)
// of them: how many it wrote to vec, where its walk ended, and its errno.
func pagemapScan(pagemap *os.File, start, end uint64, vec []pageRegion) (n int, walkEnd uint64, e syscall.Errno) {
	arg := pmScanArg{
		size: uint64(unsafe.Sizeof(pmScanArg{})), start: start, end: end,
		vec: uint64(uintptr(unsafe.Pointer(&vec[0]))), vecLen: uint64(len(vec)),
		categoryAnyofMask: pageIsPresent | pageIsSwapped,
		returnMask:        pageIsPresent | pageIsSwapped | pageIsSoftDirty,
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, pagemap.Fd(), PagemapScanIoctl, uintptr(unsafe.Pointer(&arg)))
	runtime.KeepAlive(vec)
	return int(r), arg.walkEnd, e
}

// scanByIoctl is scanHeld by PAGEMAP_SCAN. A kernel without it answers
// ENOTTY, before it calls f (any other error is the ioctl's: a kernel
// that has it refusing our arguments must not be taken for one without).
func (r *guestRAM) scanByIoctl(f func(first, n uint64, softDirty bool)) error {
	if r.pagemap == nil {
		return unix.ENOTTY
	}
	if r.regionBuf == nil {
		r.regionBuf = make([]pageRegion, scanRegions)
	}
	base := uint64(uintptrOf(r.mem))
	end := base + uint64(len(r.mem))
	for start := base; start < end; {
		n, walkEnd, e := pagemapScan(r.pagemap, start, end, r.regionBuf)
		if e != 0 {
			return fmt.Errorf("PAGEMAP_SCAN: %w", e)
		}
		for _, g := range r.regionBuf[:n] {
			if g.start < base || g.end > end || g.end <= g.start {
				return fmt.Errorf("PAGEMAP_SCAN: run %#x-%#x outside RAM %#x-%#x", g.start, g.end, base, end)
			}
			f((g.start-base)/pageSize, (g.end-g.start)/pageSize, g.categories&pageIsSoftDirty != 0)
		}
		if walkEnd <= start || walkEnd > end {
			return fmt.Errorf("PAGEMAP_SCAN: the walk ended at %#x, from %#x to %#x", walkEnd, start, end)
		}
		start = walkEnd
	}
	return nil
}

// scanByRead is scanHeld by reading the pagemap (scanPagemap), a page
// at a time.
func (r *guestRAM) scanByRead(f func(first, n uint64, softDirty bool)) error {
	return r.scanPagemap(pmPresent|pmSwapped, func(p, e uint64) { f(p, 1, e&pmSoftDirty != 0) })
}
