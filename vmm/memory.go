package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
	"sandfs/vmm/boot"
	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// guestRAM is the guest's RAM: one host mapping that the VMM owns, split into
// memory slots around the MMIO hole (boot.RAMLayout). Anonymous and
// MAP_PRIVATE|MAP_NORESERVE for a cold boot; for a restore, a snapshot
// chain mapped MAP_PRIVATE (snapshot.Map), so pages are read lazily and the
// guest's writes never reach the files. It also tracks dirty pages
// (dirty.go).
type guestRAM struct {
	mem     []byte
	size    uint64
	regions []boot.RAMRegion
	maps    int // mmap calls that built mem (1 for anonymous RAM)
	// pagemap is /proc/self/pagemap, opened with the RAM: after a uid
	// drop the process is not dumpable and can no longer open its own
	// /proc files, but reads on this fd still work. nil if out of reach.
	pagemap *os.File
	// clearRefs is /proc/self/clear_refs, open for soft-dirty tracking.
	clearRefs *os.File
	pmBuf     []uint64     // scanPagemap's buffer, kept (guarded by Machine.ctl)
	regionBuf []pageRegion // scanByIoctl's buffer, kept (guarded by Machine.ctl)
	scan      int          // how scanHeld finds held pages: scanUnknown until its first scan
	tracking  string       // TrackSoftDirty or TrackDirtyLog, fixed at mapRAM
	// vmmLog is the pages devices wrote (dirty-log tracking), set
	// atomically by MarkDirty from any goroutine.
	vmmLog snapshot.Pages

	// Guarded by Machine.ctl (and only touched with the machine paused):
	restored bool               // mem is a snapshot chain, not anonymous
	dirty    snapshot.Pages     // dirtied since base (collected so far)
	known    snapshot.Pages     // restored RAM: pages that may hold data
	base     *snapshot.Snapshot // the snapshot dirty is relative to; nil before the first
	shape    snapshot.Shape     // base's chain's, base last (deltaOver)
}

// procFiles are the process's own /proc files guest RAM uses, opened
// before a jail hides /proc (MachineConfig.Pagemap, ClearRefs).
type procFiles struct{ pagemap, clearRefs *os.File }

var (
	_ bus.Memory         = (*guestRAM)(nil)
	_ virtio.DirtyLogger = (*guestRAM)(nil)
)

// mapRAM maps size bytes of guest RAM: fresh, or, if file is set, the
// snapshot chain ending at the snapshot directory that holds file (its
// MemFile). The files in pf (nil: opened here if /proc is there) are taken
// over. It picks the dirty-page tracking: tracking if set, else
// soft-dirty where the kernel has PAGEMAP_SCAN and claimSoftDirty passes,
// else the dirty log.
func mapRAM(size uint64, file string, pf procFiles, tracking string) (r *guestRAM, err error) {
	r = &guestRAM{size: size, regions: boot.RAMLayout(size), pagemap: pf.pagemap, clearRefs: pf.clearRefs}
	defer func(ram *guestRAM) {
		if err != nil {
			ram.close()
		}
	}(r)
	if size == 0 || size%(2<<20) != 0 {
		return nil, fmt.Errorf("map guest RAM: size %d is not a positive multiple of 2 MiB", size)
	}
	if r.pagemap == nil {
		r.pagemap, _ = os.Open("/proc/self/pagemap") // nil in a jail: see tracking
	}
	if r.clearRefs == nil {
		r.clearRefs, _ = os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	}
	pages := size / pageSize
	r.dirty, r.known = snapshot.NewPages(pages), snapshot.NewPages(pages)
	if file == "" {
		r.mem, err = unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil, fmt.Errorf("map guest RAM: %w", err)
		}
		r.maps = 1
	} else if err := r.mapChain(filepath.Dir(file)); err != nil {
		return nil, err
	}
	// Soft-dirty and snapshot files work in 4 KiB pages; THP would make
	// both 2 MiB-grained (snapshot-notes.md). EINVAL without THP: ignored.
	_ = unix.Madvise(r.mem, unix.MADV_NOHUGEPAGE)
	switch r.tracking = tracking; tracking {
	case "":
		// Soft-dirty only where the pagemap answers PAGEMAP_SCAN: reading
		// it whole costs every snapshot 8 bytes a page of RAM, where the
		// dirty log's bitmap is a bit a page and its re-arm leaves the
		// guest's working set mapped (dirty.go).
		r.tracking = TrackDirtyLog
		if r.findScan() == scanIoctl && claimSoftDirty(r.pagemap, r.clearRefs) {
			r.tracking = TrackSoftDirty
		}
	case TrackSoftDirty:
		if !claimSoftDirty(r.pagemap, r.clearRefs) {
			r.tracking = ""
			return nil, msg.Errorf(syscall.EOPNOTSUPP, "map guest RAM: no soft-dirty bits here (CONFIG_MEM_SOFT_DIRTY, /proc), or another machine of this process has them")
		}
	case TrackDirtyLog:
	default:
		return nil, msg.Errorf(syscall.EINVAL, "map guest RAM: unknown dirty tracking %s", msg.Cite(tracking))
	}
	if r.tracking == TrackDirtyLog {
		r.vmmLog = snapshot.NewPages(pages)
	}
	return r, nil
}

// mapChain maps the snapshot chain ending at dir as RAM.
func (r *guestRAM) mapChain(dir string) error {
	chain, err := snapshot.Chain(dir)
	if err != nil {
		return fmt.Errorf("map guest RAM: %w", err)
	}
	if top := chain[len(chain)-1]; top.MemBytes != r.size {
		return fmt.Errorf("map guest RAM: snapshot %s holds %d bytes of memory, want %d", top.ID, top.MemBytes, r.size)
	}
	mp, err := snapshot.Map(chain)
	if err != nil {
		return fmt.Errorf("map guest RAM: %w", err)
	}
	r.mem, r.maps, r.known = mp.Mem, mp.Maps, mp.Pages
	r.restored, r.base, r.shape = true, chain[len(chain)-1], snapshot.ShapeOf(chain)
	return nil
}

func (r *guestRAM) close() error {
	if r.tracking == TrackSoftDirty {
		releaseSoftDirty()
		r.tracking = ""
	}
	for _, f := range []**os.File{&r.pagemap, &r.clearRefs} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// low is RAM from guest-physical 0 up to the MMIO hole.
func (r *guestRAM) low() []byte { return r.mem[:r.regions[0].Size] }

// Slice implements bus.Memory.Slice.
func (r *guestRAM) Slice(gpa uint64, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("guest memory: negative length %d", n)
	}
	for _, reg := range r.regions {
		if gpa >= reg.GPA && gpa-reg.GPA <= reg.Size && uint64(n) <= reg.Size-(gpa-reg.GPA) {
			off := reg.Offset + gpa - reg.GPA
			return r.mem[off : off+uint64(n) : off+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("guest memory: %d bytes at %#x are not RAM", n, gpa)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
