package vmm

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/vmm/boot"
	"sandfs/vmm/bus"
)

// guestRAM is the guest's RAM: one host mapping that the VMM owns, split into
// memory slots around the MMIO hole (boot.RAMLayout). Anonymous and
// MAP_PRIVATE|MAP_NORESERVE for a cold boot; a MAP_PRIVATE mapping of a
// snapshot's memory file for a restore, so pages are read lazily and the
// guest's writes never reach the file.
type guestRAM struct {
	mem     []byte
	size    uint64
	regions []boot.RAMRegion
	file    bool // mapped from a snapshot file
	// pagemap is /proc/self/pagemap, opened with the RAM (anonymous
	// only): after a uid drop the process is not dumpable and can no
	// longer open its own /proc files, but reads on this fd still work.
	pagemap *os.File
}

var _ bus.Memory = (*guestRAM)(nil)

// mapRAM maps size bytes of guest RAM, from file for a restore; pagemap
// (nil: opened here) is kept for fresh anonymous RAM, closed otherwise.
func mapRAM(size uint64, file string, pagemap *os.File) (r *guestRAM, err error) {
	if pagemap != nil {
		defer func() {
			if r == nil || r.pagemap != pagemap {
				pagemap.Close()
			}
		}()
	}
	if size == 0 || size%(2<<20) != 0 {
		return nil, fmt.Errorf("map guest RAM: size %d is not a positive multiple of 2 MiB", size)
	}
	r = &guestRAM{size: size, regions: boot.RAMLayout(size)}
	if file == "" {
		r.mem, err = unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil, fmt.Errorf("map guest RAM: %w", err)
		}
		r.pagemap = pagemap
		if r.pagemap == nil {
			r.pagemap, _ = os.Open("/proc/self/pagemap") // else SaveMemory opens it
		}
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("map guest RAM: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("map guest RAM: %w", err)
		}
		if uint64(st.Size()) != size {
			return nil, fmt.Errorf("map guest RAM: %s is %d bytes, want %d", file, st.Size(), size)
		}
		r.mem, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_NORESERVE)
		if err != nil {
			return nil, fmt.Errorf("map guest RAM %s: %w", file, err)
		}
		r.file = true
	}
	// Soft-dirty and snapshot files work in 4 KiB pages; THP would make
	// both 2 MiB-grained (snapshot-notes.md). EINVAL without THP: ignored.
	_ = unix.Madvise(r.mem, unix.MADV_NOHUGEPAGE)
	return r, nil
}

func (r *guestRAM) close() error {
	if r.pagemap != nil {
		r.pagemap.Close()
		r.pagemap = nil
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
