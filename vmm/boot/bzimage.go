package boot

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// struct boot_params / setup_header offsets (arch/x86/include/uapi/asm/bootparam.h).
const (
	bpExtRamdiskImage = 0x0c0
	bpExtRamdiskSize  = 0x0c4
	bpExtCmdLinePtr   = 0x0c8
	bpE820Entries     = 0x1e8
	hdrStart          = 0x1f1 // setup_sects, first byte of struct setup_header
	hdrBootFlag       = 0x1fe
	hdrJump           = 0x200 // jump instruction; byte 0x201 gives the header's length
	hdrMagic          = 0x202 // "HdrS"
	hdrVersion        = 0x206
	hdrTypeOfLoader   = 0x210
	hdrLoadflags      = 0x211
	hdrRamdiskImage   = 0x218
	hdrRamdiskSize    = 0x21c
	hdrHeapEndPtr     = 0x224
	hdrCmdLinePtr     = 0x228
	hdrInitrdAddrMax  = 0x22c
	hdrXLoadflags     = 0x236
	hdrCmdlineSize    = 0x238
	hdrInitSize       = 0x260
	bpE820Table       = 0x2d0
	bpSize            = 4096

	e820Max = 128 // E820_MAX_ENTRIES_ZEROPAGE

	loadedHigh  = 0x01 // LOADED_HIGH
	canUseHeap  = 0x80 // CAN_USE_HEAP
	xlfKernel64 = 0x01 // XLF_KERNEL_64

	minVersion = 0x020c // 2.12: xloadflags, 64-bit entry
)

// E820 types.
const (
	E820RAM      = 1
	E820Reserved = 2
)

// E820Entry is one range of the BIOS memory map.
type E820Entry struct {
	Addr, Size uint64
	Type       uint32
}

// Kernel is a parsed bzImage.
type Kernel struct {
	Header    []byte // setup header bytes, to copy into the zero page at 0x1f1
	Code      []byte // protected-mode kernel, loaded at KernelAddr
	Version   uint16
	InitSize  uint64 // memory the kernel needs from KernelAddr while booting
	CmdMax    uint32 // cmdline_size: the longest command line the kernel takes
	InitrdMax uint32 // initrd_addr_max
}

// ErrNotBzImage is returned for a file without the "HdrS" setup header.
var ErrNotBzImage = errors.New("not a bzImage")

// ParseBzImage checks a bzImage and splits it into header and kernel.
func ParseBzImage(img []byte) (*Kernel, error) {
	if len(img) < bpE820Table || string(img[hdrMagic:hdrMagic+4]) != "HdrS" ||
		binary.LittleEndian.Uint16(img[hdrBootFlag:]) != 0xaa55 {
		return nil, fmt.Errorf("parse kernel: %w", ErrNotBzImage)
	}
	k := &Kernel{Version: binary.LittleEndian.Uint16(img[hdrVersion:])}
	if k.Version < minVersion {
		return nil, fmt.Errorf("parse kernel: boot protocol %#x, want >= %#x", k.Version, minVersion)
	}
	if binary.LittleEndian.Uint16(img[hdrXLoadflags:])&xlfKernel64 == 0 {
		return nil, fmt.Errorf("parse kernel: no 64-bit entry point (XLF_KERNEL_64)")
	}
	setupSects := int(img[hdrStart])
	if setupSects == 0 {
		setupSects = 4
	}
	codeOff := (setupSects + 1) * 512
	if codeOff >= len(img) {
		return nil, fmt.Errorf("parse kernel: setup_sects %d beyond the image (%d bytes)", setupSects, len(img))
	}
	hdrEnd := hdrJump + 2 + int(img[hdrJump+1])
	if hdrEnd > codeOff || hdrEnd > bpE820Table {
		return nil, fmt.Errorf("parse kernel: setup header of %d bytes", hdrEnd-hdrStart)
	}
	k.Header = img[hdrStart:hdrEnd]
	k.Code = img[codeOff:]
	k.InitSize = uint64(binary.LittleEndian.Uint32(img[hdrInitSize:]))
	k.CmdMax = binary.LittleEndian.Uint32(img[hdrCmdlineSize:])
	k.InitrdMax = binary.LittleEndian.Uint32(img[hdrInitrdAddrMax:])
	return k, nil
}

// Params says where things landed; the machine puts the boot CPU there.
type Params struct {
	Entry      uint64 // 64-bit entry point: KernelAddr + 0x200
	ZeroPage   uint64
	InitrdAddr uint64
	E820       []E820Entry
}

// Load writes kernel, initrd, command line, zero page, page tables and GDT
// into ram, which is guest-physical memory from address 0 (the part of the
// host mapping below the MMIO hole); memBytes is the guest's whole RAM size.
func Load(ram []byte, memBytes uint64, k *Kernel, initrd []byte, cmdline string) (*Params, error) {
	low := uint64(len(ram))
	if uint64(len(k.Code))+KernelAddr > low || KernelAddr+k.InitSize > low {
		return nil, fmt.Errorf("load kernel: needs %d MiB, RAM is %d MiB", (KernelAddr+max(k.InitSize, uint64(len(k.Code))))>>20, low>>20)
	}
	if len(cmdline)+1 > int(k.CmdMax) || len(cmdline)+1 > CmdlineMax {
		return nil, fmt.Errorf("load kernel: command line of %d bytes, kernel takes %d", len(cmdline), k.CmdMax)
	}
	copy(ram[KernelAddr:], k.Code)

	zp := ram[ZeroPageAddr : ZeroPageAddr+bpSize]
	clear(zp)
	copy(zp[hdrStart:], k.Header)
	zp[hdrTypeOfLoader] = 0xff // undefined loader
	zp[hdrLoadflags] |= loadedHigh | canUseHeap
	// Heap end: relative to the real-mode setup code at 0x10000; unused by
	// the 64-bit entry but required with CAN_USE_HEAP.
	binary.LittleEndian.PutUint16(zp[hdrHeapEndPtr:], 0xfe00)

	copy(ram[CmdlineAddr:], cmdline)
	ram[CmdlineAddr+uint64(len(cmdline))] = 0
	binary.LittleEndian.PutUint32(zp[hdrCmdLinePtr:], CmdlineAddr)
	binary.LittleEndian.PutUint32(zp[bpExtCmdLinePtr:], 0)

	p := &Params{Entry: KernelAddr + 0x200, ZeroPage: ZeroPageAddr}
	if len(initrd) > 0 {
		top := low
		if lim := uint64(k.InitrdMax) + 1; k.InitrdMax != 0 && lim < top {
			top = lim
		}
		size := uint64(len(initrd))
		if size >= top {
			return nil, fmt.Errorf("load initrd: %d bytes do not fit below %#x", size, top)
		}
		addr := (top - size) &^ 0xfff
		if addr < KernelAddr+max(k.InitSize, uint64(len(k.Code))) {
			return nil, fmt.Errorf("load initrd: %d MiB initrd overlaps the kernel in %d MiB of RAM", size>>20, low>>20)
		}
		copy(ram[addr:], initrd)
		binary.LittleEndian.PutUint32(zp[hdrRamdiskImage:], uint32(addr))
		binary.LittleEndian.PutUint32(zp[hdrRamdiskSize:], uint32(size))
		binary.LittleEndian.PutUint32(zp[bpExtRamdiskImage:], uint32(addr>>32))
		binary.LittleEndian.PutUint32(zp[bpExtRamdiskSize:], uint32(size>>32))
		p.InitrdAddr = addr
	}

	p.E820 = E820(memBytes)
	if len(p.E820) > e820Max {
		return nil, fmt.Errorf("load kernel: %d e820 entries", len(p.E820))
	}
	zp[bpE820Entries] = uint8(len(p.E820))
	for i, e := range p.E820 {
		b := zp[bpE820Table+20*i:]
		binary.LittleEndian.PutUint64(b[0:], e.Addr)
		binary.LittleEndian.PutUint64(b[8:], e.Size)
		binary.LittleEndian.PutUint32(b[16:], e.Type)
	}

	writePageTables(ram)
	writeGDT(ram)
	return p, nil
}

// E820 is the memory map for memBytes of RAM laid out by RAMLayout: low RAM
// up to the EBDA, the EBDA/MP table reserved, RAM from 1 MiB to the hole, and
// RAM above 4 GiB.
func E820(memBytes uint64) []E820Entry {
	es := []E820Entry{
		{0, EBDAAddr, E820RAM},
		{EBDAAddr, 0xa0000 - EBDAAddr, E820Reserved},
	}
	for _, r := range RAMLayout(memBytes) {
		start, end := r.GPA, r.GPA+r.Size
		if start < KernelAddr {
			start = KernelAddr
		}
		if end > start {
			es = append(es, E820Entry{start, end - start, E820RAM})
		}
	}
	return es
}
