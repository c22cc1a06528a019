// Package boot loads a Linux bzImage into guest RAM with the x86 64-bit boot
// protocol (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol") and
// builds what the kernel expects around it: the zero page (struct
// boot_params) with an e820 map, the command line, identity page tables, a
// GDT, the boot CPU's registers and an Intel MP table (MultiProcessor
// Specification 1.4) so that every vCPU is found without ACPI.
package boot

// Guest-physical memory map. RAM starts at 0 and runs up to the MMIO hole;
// RAM beyond that continues at 4 GiB. Every address below is a constant so
// that a snapshot taken by one VMM build restores in another.
//
//	0x0000_0000 ┌──────────────────────────────┐
//	            │ real-mode IVT, BDA (zeroes)   │
//	0x0000_0500 │ GDT  (null,null,code,data,TSS)│ GDTAddr
//	0x0000_0520 │ IDT  (empty)                  │ IDTAddr
//	0x0000_7000 │ zero page (boot_params)       │ ZeroPageAddr
//	0x0000_8ff0 │ boot stack (grows down)       │ BootStackAddr
//	0x0000_9000 │ PML4                          │ PML4Addr
//	0x0000_a000 │ PDPT                          │ PDPTAddr
//	0x0000_b000 │ 4 × PD, 2 MiB pages: 0-4 GiB  │ PDAddr
//	0x0000_f000 │ (free)                        │
//	0x0002_0000 │ kernel command line           │ CmdlineAddr (CmdlineMax)
//	            │ (free low RAM, e820 RAM)      │
//	0x0009_fc00 ├──────────────────────────────┤ EBDAAddr: e820 reserved
//	            │ MP floating pointer + table   │ MPTableAddr
//	0x000a_0000 │ legacy VGA/BIOS hole          │ (RAM-backed, e820 absent)
//	0x0010_0000 ├──────────────────────────────┤ KernelAddr: e820 RAM
//	            │ protected-mode kernel         │ 64-bit entry at +0x200
//	            │ ... decompressed in place ... │
//	            │ initrd (page-aligned, at the  │
//	            │ top of RAM below the hole)    │
//	0xd000_0000 ├──────────────────────────────┤ MMIOHoleStart
//	            │ virtio-mmio slots, 4 KiB each │ VirtioMMIOBase + i*VirtioMMIOSize
//	            │ ...                           │
//	0xfec0_0000 │ IOAPIC (in-kernel)            │ IOAPICAddr
//	0xfee0_0000 │ local APICs (in-kernel)       │ LAPICAddr
//	0xfffb_c000 │ VMX identity-map page         │ IdentityMapAddr
//	0xfffb_d000 │ VMX real-mode TSS (3 pages)   │ TSSAddr
//	0x1_0000_0000├─────────────────────────────┤ HighRAMStart
//	            │ RAM above the hole, if any    │
//	            └──────────────────────────────┘
const (
	GDTAddr       = 0x500
	IDTAddr       = 0x520
	ZeroPageAddr  = 0x7000
	BootStackAddr = 0x8ff0
	PML4Addr      = 0x9000
	PDPTAddr      = 0xa000
	PDAddr        = 0xb000 // four pages, 0xb000-0xefff
	CmdlineAddr   = 0x20000
	CmdlineMax    = 0x10000 // we never write more; the kernel's limit is cmdline_size
	EBDAAddr      = 0x9fc00
	MPTableAddr   = EBDAAddr
	KernelAddr    = 0x100000

	MMIOHoleStart   = 0xd000_0000
	MMIOHoleEnd     = 0x1_0000_0000
	VirtioMMIOBase  = MMIOHoleStart
	VirtioMMIOSize  = 0x1000
	VirtioMMIOSlots = 64
	IOAPICAddr      = 0xfec0_0000
	LAPICAddr       = 0xfee0_0000
	IdentityMapAddr = 0xfffb_c000
	TSSAddr         = 0xfffb_d000
	HighRAMStart    = MMIOHoleEnd

	// First IRQ line handed to virtio-mmio devices: 0-2 timer/cascade, 3-4
	// serial ports, 5 and up free (Firecracker starts at 5 too). The
	// IOAPIC has 24 pins, so lines 5..23 give 19 devices.
	VirtioIRQBase = 5
	IRQMax        = 23

	// SerialIRQ is COM1's line (ttyS0 at 0x3f8).
	SerialIRQ = 4
)

// RAMRegion is one range of guest RAM and its offset in the VMM's single
// RAM mapping.
type RAMRegion struct {
	GPA    uint64 // guest-physical start
	Size   uint64
	Offset uint64 // offset in the host mapping
}

// RAMLayout splits memBytes of RAM around the MMIO hole: one region from 0,
// and a second from 4 GiB if RAM does not fit below the hole. The host
// mapping is one contiguous range; region i starts at its Offset.
func RAMLayout(memBytes uint64) []RAMRegion {
	if memBytes <= MMIOHoleStart {
		return []RAMRegion{{GPA: 0, Size: memBytes}}
	}
	return []RAMRegion{
		{GPA: 0, Size: MMIOHoleStart},
		{GPA: HighRAMStart, Size: memBytes - MMIOHoleStart, Offset: MMIOHoleStart},
	}
}
