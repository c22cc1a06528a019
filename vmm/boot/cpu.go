package boot

import "encoding/binary"

// Page-table entry bits.
const (
	ptePresent = 1 << 0
	pteWrite   = 1 << 1
	ptePS      = 1 << 7 // 2 MiB page in a PD entry
)

// writePageTables identity-maps the first 4 GiB with 2 MiB pages: the 64-bit
// boot protocol needs the kernel, zero page and command line mapped 1:1.
func writePageTables(ram []byte) {
	clear(ram[PML4Addr : PDAddr+4*0x1000])
	binary.LittleEndian.PutUint64(ram[PML4Addr:], PDPTAddr|ptePresent|pteWrite)
	for i := uint64(0); i < 4; i++ {
		pd := PDAddr + i*0x1000
		binary.LittleEndian.PutUint64(ram[PDPTAddr+8*i:], pd|ptePresent|pteWrite)
		for j := uint64(0); j < 512; j++ {
			addr := (i<<30 | j<<21)
			binary.LittleEndian.PutUint64(ram[pd+8*j:], addr|ptePresent|pteWrite|ptePS)
		}
	}
}

// GDT selectors. 0x10 and 0x18 are __BOOT_CS and __BOOT_DS of the boot
// protocol; the TSS is only there because VMX refuses an unusable TR.
const (
	SelectorCode = 0x10
	SelectorData = 0x18
	SelectorTSS  = 0x20
)

// gdtEntry encodes a segment descriptor from flags (the access byte in bits
// 0-7, the granularity nibble in bits 12-15), base and limit, as the Intel
// SDM vol. 3 §3.4.5 lays it out.
func gdtEntry(flags uint16, base, limit uint32) uint64 {
	return uint64(base&0xff000000)<<32 | uint64(flags&0xf0ff)<<40 |
		uint64(limit&0x000f0000)<<32 | uint64(base&0x00ffffff)<<16 | uint64(limit&0xffff)
}

// GDT is the boot GDT: null, null, 64-bit code, data, TSS.
var GDT = [5]uint64{
	0,
	0,
	gdtEntry(0xa09b, 0, 0xfffff), // code: present, DPL0, exec/read, accessed; L=1, G=1
	gdtEntry(0xc093, 0, 0xfffff), // data: present, DPL0, read/write, accessed; D/B=1, G=1
	gdtEntry(0x808b, 0, 0xfffff), // TSS: present, 64-bit busy TSS; G=1
}

func writeGDT(ram []byte) {
	for i, e := range GDT {
		binary.LittleEndian.PutUint64(ram[GDTAddr+8*i:], e)
	}
	clear(ram[IDTAddr : IDTAddr+8])
}

// Control register bits for the boot CPU.
const (
	CR0PE   = 1 << 0
	CR0ET   = 1 << 4
	CR0PG   = 1 << 31
	CR4PAE  = 1 << 5
	EFERLME = 1 << 8
	EFERLMA = 1 << 10
)
