package vmm

import (
	"encoding/binary"
	"fmt"
	mbits "math/bits"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/snapshot"
	"sandfs/vmm/kvm"
)

// Dirty-page tracking: which guest pages changed since the last snapshot
// (or restore), so the next snapshot writes only those. Two mechanisms,
// chosen once per machine by probing the host kernel (mapRAM: soft-dirty
// where probeSoftDirty passes and the pagemap answers PAGEMAP_SCAN, else
// the dirty log); shared/reference/snapshot-notes.md has the
// measurements behind both.
//
//   - soft-dirty: bit 55 of /proc/self/pagemap (read, or asked by the
//     PAGEMAP_SCAN ioctl where the kernel has it: pagescan.go), re-armed
//     by writing "4" to /proc/self/clear_refs. Sees guest and VMM writes
//     alike. The clear is process-wide and makes the guest re-fault its
//     working set.
//   - dirty-log: KVM_MEM_LOG_DIRTY_PAGES on every slot and
//     KVM_GET_DIRTY_LOG (fetch and re-arm in one call). Sees only guest
//     writes, so the devices' own writes, which virtio reports through
//     virtio.DirtyLogger (MarkDirty), are logged as well (vmmLog). Used
//     where soft-dirty would need the whole pagemap read at every
//     snapshot (a kernel before 6.7), where CONFIG_MEM_SOFT_DIRTY is off,
//     or where /proc is out of reach.
//
// clear_refs is process-wide: one machine's re-arm would wipe another's
// dirty bits. So at most one machine per process tracks with soft-dirty
// (claimSoftDirty); the others use the dirty log. The VMM runs one machine
// per process; tests may run several.
//
// Collecting and re-arming happen with the vCPUs and devices paused
// (Machine.Snapshot, Machine.Restore hold ctl on a paused machine). The
// VMM never discards guest pages (MADV_DONTNEED would hide a dirty page
// from soft-dirty), and guest RAM is MADV_NOHUGEPAGE (THP would make
// tracking 2 MiB-grained).

// Tracking mechanisms, as DirtyTracking reports them.
const (
	TrackSoftDirty = "soft-dirty"
	TrackDirtyLog  = "dirty-log"
)

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmSoftDirty = 1 << 55
	pmSwapped   = 1 << 62
	pmPresent   = 1 << 63
)

// clearSoftDirty is what clear_refs takes to clear soft-dirty bits
// (CLEAR_REFS_SOFT_DIRTY, fs/proc/task_mmu.c).
var clearSoftDirty = []byte("4")

var (
	softDirtyMu    sync.Mutex
	softDirtyTaken bool // guarded by softDirtyMu: a live machine tracks with soft-dirty
)

// claimSoftDirty makes the caller this process's soft-dirty machine if
// no other is and the probe passes; releaseSoftDirty gives it back.
func claimSoftDirty(pagemap, clearRefs *os.File) bool {
	softDirtyMu.Lock()
	defer softDirtyMu.Unlock()
	if softDirtyTaken || !probeSoftDirty(pagemap, clearRefs) {
		return false
	}
	softDirtyTaken = true
	return true
}

func releaseSoftDirty() {
	softDirtyMu.Lock()
	softDirtyTaken = false
	softDirtyMu.Unlock()
}

// probeSoftDirty reports whether soft-dirty works in this process: a
// fresh page, written, cleared through clearRefs, must read clean, and
// after one more write dirty. Without CONFIG_MEM_SOFT_DIRTY the bit never
// sets. It clears the whole process's soft-dirty bits (harmless before
// the guest runs).
func probeSoftDirty(pagemap, clearRefs *os.File) bool {
	if pagemap == nil || clearRefs == nil {
		return false
	}
	b, err := unix.Mmap(-1, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return false
	}
	defer unix.Munmap(b)
	b[0] = 1
	if _, err := clearRefs.Write(clearSoftDirty); err != nil {
		return false
	}
	e1, err1 := pagemapEntry(pagemap, b)
	b[0] = 2
	e2, err2 := pagemapEntry(pagemap, b)
	return err1 == nil && err2 == nil && e1&pmSoftDirty == 0 && e2&pmSoftDirty != 0 && e2&pmPresent != 0
}

func pagemapEntry(pagemap *os.File, b []byte) (uint64, error) {
	var e [8]byte
	if _, err := pagemap.ReadAt(e[:], int64(uintptrOf(b)/pageSize*8)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(e[:]), nil
}

// pagemapChunk is how many pagemap entries one read takes: 256 KiB of
// entries, 128 MiB of guest RAM, in a buffer kept with the RAM. A larger,
// fresh buffer costs more in page faults than it saves in reads (in the
// lab a 4 MiB one, faulted in per snapshot, cost more than the scan).
const pagemapChunk = 32 << 10

// scanPagemap calls f with the pagemap entry of each page of RAM that
// has a bit of mask set (pages holding data: pmPresent|pmSwapped); the
// others are skipped inline, not passed to f. With Machine.ctl held.
// (Splitting the scan between two goroutines gained 13% in the lab,
// where the kernel's read of the entries is nine tenths of it: one
// goroutine.)
func (r *guestRAM) scanPagemap(mask uint64, f func(page uint64, e uint64)) error {
	pages := uint64(len(r.mem) / pageSize)
	if r.pmBuf == nil {
		r.pmBuf = make([]uint64, min(pagemapChunk, pages))
	}
	base := int64(uintptrOf(r.mem) / pageSize * 8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&r.pmBuf[0])), 8*len(r.pmBuf)) // pagemap entries are host-endian u64
	for p := uint64(0); p < pages; p += uint64(len(r.pmBuf)) {
		n := min(uint64(len(r.pmBuf)), pages-p)
		if _, err := r.pagemap.ReadAt(buf[:8*n], base+int64(8*p)); err != nil {
			return fmt.Errorf("read pagemap: %w", err)
		}
		for i, e := range r.pmBuf[:n] {
			if e&mask != 0 {
				f(p+uint64(i), e)
			}
		}
	}
	return nil
}

// slotFlags are the memory slot flags the tracking needs.
func (r *guestRAM) slotFlags() uint32 {
	if r.tracking == TrackDirtyLog {
		return kvm.MemLogDirtyPages
	}
	return 0
}

// MarkDirty implements virtio.DirtyLogger: a device wrote [gpa, gpa+n)
// of guest RAM. Logged for dirty-log tracking only (soft-dirty sees
// those writes itself); a range outside RAM is ignored (Slice refused it).
func (r *guestRAM) MarkDirty(gpa uint64, n int) {
	if r.tracking != TrackDirtyLog || n <= 0 {
		return
	}
	for _, reg := range r.regions {
		if gpa >= reg.GPA && gpa-reg.GPA < reg.Size {
			off := reg.Offset + gpa - reg.GPA
			last := min(off+uint64(n), reg.Offset+reg.Size) - 1
			for p := off / pageSize; p <= last/pageSize; p++ {
				atomic.OrUint64(&r.vmmLog[p/64], 1<<(p%64))
			}
			return
		}
	}
}

// collect adds the pages dirtied since the last collect (or arm) to
// r.dirty and, with soft-dirty and rearm, re-arms tracking (the dirty log
// re-arms as it is read; without a re-arm the next collect finds these
// pages again). With soft-dirty tracking the same pagemap
// read also gives the pages that hold data (present or swapped), which it
// returns for a full snapshot (fullPages); otherwise it returns nil. vCPUs
// and devices must be paused.
// Its steps are marked in tm (t: when the last one ended).
func (r *guestRAM) collect(vm *kvm.VM, rearm bool, tm *snapshot.Timing, t *snapshot.Stamp) (held snapshot.Pages, err error) {
	switch r.tracking {
	case TrackSoftDirty:
		held = snapshot.NewPages(uint64(len(r.mem) / pageSize))
		err := r.scanHeld(func(p, n uint64, softDirty bool) {
			held.SetRange(p, n)
			if softDirty {
				r.dirty.SetRange(p, n)
			}
		})
		if err != nil {
			return nil, err
		}
		tm.Mark("pagemap", t)
		if !rearm {
			break
		}
		if _, err := r.clearRefs.Write(clearSoftDirty); err != nil {
			return nil, fmt.Errorf("clear soft-dirty bits: %w", err)
		}
		tm.Mark("clear-refs", t)
	case TrackDirtyLog:
		for i, reg := range r.regions {
			bm := make([]uint64, (reg.Size/pageSize+63)/64)
			if err := vm.DirtyLog(uint32(i), bm); err != nil {
				return nil, err
			}
			first := reg.Offset / pageSize
			for w, bits := range bm {
				for ; bits != 0; bits &= bits - 1 {
					r.dirty.Set(first + uint64(w*64) + uint64(mbits.TrailingZeros64(bits)))
				}
			}
		}
		for i := range r.vmmLog {
			r.dirty[i] |= atomic.SwapUint64(&r.vmmLog[i], 0)
		}
		tm.Mark("dirty-log", t)
	}
	return held, nil
}

// arm starts tracking afresh (after a restore): whatever the mapping
// shows as dirty so far is not a change of the guest's. It reads no
// pagemap (that is O(memory)): clear_refs walks only populated page
// tables, and a new slot's dirty log starts empty.
func (r *guestRAM) arm() error {
	switch r.tracking {
	case TrackSoftDirty:
		if _, err := r.clearRefs.Write(clearSoftDirty); err != nil {
			return fmt.Errorf("clear soft-dirty bits: %w", err)
		}
	case TrackDirtyLog:
		for i := range r.vmmLog {
			atomic.StoreUint64(&r.vmmLog[i], 0)
		}
	}
	r.dirty.Clear()
	return nil
}

// present is the set of pages of anonymous RAM that hold data (present
// or swapped), or, without a pagemap, that are not all zero.
func (r *guestRAM) present() (snapshot.Pages, error) {
	s := snapshot.NewPages(uint64(len(r.mem) / pageSize))
	if r.pagemap == nil {
		for p := range uint64(len(r.mem) / pageSize) {
			if !isZero(r.mem[p*pageSize : (p+1)*pageSize]) {
				s.Set(p)
			}
		}
		return s, nil
	}
	err := r.scanHeld(func(p, n uint64, _ bool) { s.SetRange(p, n) })
	return s, err
}

func isZero(b []byte) bool {
	for i := 0; i+8 <= len(b); i += 8 {
		if *(*uint64)(unsafe.Pointer(&b[i])) != 0 {
			return false
		}
	}
	return true
}
