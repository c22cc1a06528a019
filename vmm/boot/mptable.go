package boot

import (
	"encoding/binary"
	"fmt"
)

// MP table (Intel MultiProcessor Specification 1.4, chapter 4; Linux
// arch/x86/kernel/mpparse.c reads it). Without ACPI it is how the guest
// learns about every vCPU's local APIC, the IOAPIC and the ISA interrupt
// routing. Linux scans 639-640 KiB for the floating pointer, so it sits at
// EBDAAddr, followed by the configuration table:
//
//	+0   floating pointer "_MP_" (16 bytes) → physptr = +16
//	+16  config header "PCMP" (44 bytes)
//	     processor entries, 20 bytes each (APIC id = vCPU index, CPU 0 = BSP)
//	     bus entry "ISA", 8 bytes
//	     IOAPIC entry, 8 bytes (id = number of vCPUs, at IOAPICAddr)
//	     I/O interrupt entries for ISA IRQ 0..23 → IOAPIC pin 0..23, 8 bytes each
//	     local interrupt entries: LINT0 = ExtINT, LINT1 = NMI, 8 bytes each
const (
	mpFloatSize  = 16
	mpHeaderSize = 44
	mpProcSize   = 20
	mpEntrySize  = 8
	mpAPICVer    = 0x14 // integrated local APIC
	mpIOAPICVer  = 0x11
	mpSpecRev    = 4 // MPS 1.4
	mpBusISA     = 0

	mpProc     = 0 // MP_PROCESSOR
	mpBus      = 1 // MP_BUS
	mpIOAPIC   = 2 // MP_IOAPIC
	mpIntSrc   = 3 // MP_INTSRC
	mpLIntSrc  = 4 // MP_LINTSRC
	mpINT      = 0 // mp_INT
	mpNMI      = 1 // mp_NMI
	mpExtINT   = 3 // mp_ExtINT
	cpuEnabled = 1 // CPU_ENABLED
	cpuBSP     = 2 // CPU_BOOTPROCESSOR
)

// MaxCPUs is how many vCPUs fit in the MP table's space below 640 KiB.
const MaxCPUs = 32

// MPTableSize is the size of the MP table for cpus vCPUs.
func MPTableSize(cpus int) int {
	return mpFloatSize + mpHeaderSize + cpus*mpProcSize + mpEntrySize*(1+1+(IRQMax+1)+2)
}

func checksum(b []byte) uint8 {
	var s uint8
	for _, c := range b {
		s += c
	}
	return -s
}

// WriteMPTable writes the MP table for cpus vCPUs at MPTableAddr.
func WriteMPTable(ram []byte, cpus int) error {
	if cpus < 1 || cpus > MaxCPUs {
		return fmt.Errorf("mp table: %d vCPUs, want 1..%d", cpus, MaxCPUs)
	}
	size := MPTableSize(cpus)
	b := ram[MPTableAddr : MPTableAddr+size]
	clear(b)
	le := binary.LittleEndian

	// Floating pointer.
	copy(b[0:], "_MP_")
	le.PutUint32(b[4:], MPTableAddr+mpFloatSize)
	b[8] = 1 // length in 16-byte units
	b[9] = mpSpecRev
	b[10] = checksum(b[:mpFloatSize])

	t := b[mpFloatSize:]
	copy(t[0:], "PCMP")
	le.PutUint16(t[4:], uint16(size-mpFloatSize))
	t[6] = mpSpecRev
	copy(t[8:], "SANDFS  ")      // OEM id, 8 bytes
	copy(t[16:], "SANDFS-VMM  ") // product id, 12 bytes
	le.PutUint32(t[36:], LAPICAddr)
	off := mpHeaderSize
	n := 0
	for i := 0; i < cpus; i++ {
		e := t[off:]
		e[0] = mpProc
		e[1] = uint8(i)
		e[2] = mpAPICVer
		e[3] = cpuEnabled
		if i == 0 {
			e[3] |= cpuBSP
		}
		le.PutUint32(e[4:], 0x600) // CPU signature: family 6
		le.PutUint32(e[8:], 0x201) // feature flags: FPU, APIC
		off += mpProcSize
		n++
	}
	e := t[off:]
	e[0], e[1] = mpBus, mpBusISA
	copy(e[2:8], "ISA   ")
	off += mpEntrySize
	ioapicID := uint8(cpus)
	e = t[off:]
	e[0], e[1], e[2], e[3] = mpIOAPIC, ioapicID, mpIOAPICVer, 1 // enabled
	le.PutUint32(e[4:], IOAPICAddr)
	off += mpEntrySize
	n += 2
	for irq := 0; irq <= IRQMax; irq++ {
		e = t[off:]
		e[0], e[1] = mpIntSrc, mpINT // flags 0: conforms to the bus (ISA: edge, active high)
		e[4], e[5], e[6], e[7] = mpBusISA, uint8(irq), ioapicID, uint8(irq)
		off += mpEntrySize
		n++
	}
	for lint, typ := range []uint8{mpExtINT, mpNMI} {
		e = t[off:]
		e[0], e[1] = mpLIntSrc, typ
		e[4], e[5], e[6], e[7] = mpBusISA, 0, 0xff, uint8(lint) // all local APICs
		off += mpEntrySize
		n++
	}
	le.PutUint16(t[34:], uint16(n)) // entry count
	t[7] = checksum(t[:size-mpFloatSize])
	return nil
}
