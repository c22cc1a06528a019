// Package bus holds the small interfaces that join the VMM's machine
// (vmm) to its devices (vmm/serial, vmm/virtio, ...), so that devices can be
// written and unit-tested without a VM.
//
// The machine owns guest memory, the in-kernel interrupt controller and the
// exit loop; a device sees only these interfaces. All methods may be called
// from any vCPU goroutine concurrently; devices do their own locking.
package bus

// Memory is guest RAM as seen by a device doing DMA.
type Memory interface {
	// Slice returns the n bytes of guest RAM at guest-physical address gpa,
	// aliasing the VMM's mapping (writes land in guest RAM directly), or an
	// error if the range is not entirely RAM.
	Slice(gpa uint64, n int) ([]byte, error)
}

// IRQ raises and lowers interrupt lines of the guest's interrupt controller
// (KVM_IRQ_LINE on the in-kernel IOAPIC/PIC).
type IRQ interface {
	SetIRQ(line uint32, level bool) error
}

// MMIODevice serves a guest-physical MMIO window. off is relative to the
// window's base; len(data) is the access size (1, 2, 4 or 8).
type MMIODevice interface {
	ReadMMIO(off uint64, data []byte)
	WriteMMIO(off uint64, data []byte)
}

// PIODevice serves a range of x86 I/O ports. off is relative to the range's
// first port.
type PIODevice interface {
	ReadPIO(off uint16, data []byte)
	WritePIO(off uint16, data []byte)
}
