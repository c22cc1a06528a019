package kvm

import "unsafe"

// CreateIRQChip creates the in-kernel PIC pair, IOAPIC and per-vCPU local
// APICs (KVM_CREATE_IRQCHIP). Call before CreateVCPU.
func (vm *VM) CreateIRQChip() error {
	_, err := ioctl(vm.fd, "KVM_CREATE_IRQCHIP", kvmCreateIRQChip, 0)
	return err
}

// PIT flags.
const PITSpeakerDummy = 1 // KVM_PIT_SPEAKER_DUMMY

// CreatePIT2 creates the in-kernel i8254 PIT (KVM_CREATE_PIT2).
func (vm *VM) CreatePIT2(flags uint32) error {
	var cfg struct {
		Flags uint32
		Pad   [15]uint32
	}
	cfg.Flags = flags
	return ioctlPtr(vm.fd, "KVM_CREATE_PIT2", kvmCreatePIT2, unsafe.Pointer(&cfg))
}

// IRQLine sets the level of interrupt line irq (KVM_IRQ_LINE): the GSI
// routed to the PIC (0-15) and the IOAPIC (0-23).
func (vm *VM) IRQLine(irq uint32, level bool) error {
	l := struct{ IRQ, Level uint32 }{IRQ: irq}
	if level {
		l.Level = 1
	}
	return ioctlPtr(vm.fd, "KVM_IRQ_LINE", kvmIRQLine, unsafe.Pointer(&l))
}

// IRQ chip ids for IRQChip.
const (
	IRQChipPICMaster = 0 // KVM_IRQCHIP_PIC_MASTER
	IRQChipPICSlave  = 1 // KVM_IRQCHIP_PIC_SLAVE
	IRQChipIOAPIC    = 2 // KVM_IRQCHIP_IOAPIC
)

// IRQChip mirrors struct kvm_irqchip; Chip is the union, kept opaque.
type IRQChip struct {
	ChipID uint32
	Pad    uint32
	Chip   [512]byte
}

// GetIRQChip reads one in-kernel interrupt controller (KVM_GET_IRQCHIP).
func (vm *VM) GetIRQChip(id uint32) (IRQChip, error) {
	c := IRQChip{ChipID: id}
	err := ioctlPtr(vm.fd, "KVM_GET_IRQCHIP", kvmGetIRQChip, unsafe.Pointer(&c))
	return c, err
}

// SetIRQChip writes one in-kernel interrupt controller (KVM_SET_IRQCHIP).
func (vm *VM) SetIRQChip(c IRQChip) error {
	return ioctlPtr(vm.fd, "KVM_SET_IRQCHIP", kvmSetIRQChip, unsafe.Pointer(&c))
}

// PITState2 is struct kvm_pit_state2, opaque.
type PITState2 struct {
	Raw [112]byte
}

// GetPIT2 is KVM_GET_PIT2.
func (vm *VM) GetPIT2() (p PITState2, err error) {
	return p, ioctlPtr(vm.fd, "KVM_GET_PIT2", kvmGetPIT2, unsafe.Pointer(&p))
}

// SetPIT2 is KVM_SET_PIT2.
func (vm *VM) SetPIT2(p PITState2) error {
	return ioctlPtr(vm.fd, "KVM_SET_PIT2", kvmSetPIT2, unsafe.Pointer(&p))
}

// IRQFD flags.
const IRQFDDeassign = 1 // KVM_IRQFD_FLAG_DEASSIGN

// IRQFD binds eventfd fd to GSI gsi (KVM_IRQFD): a write to the eventfd
// pulses the line from the kernel, without a VMM round trip.
func (vm *VM) IRQFD(fd int, gsi uint32, flags uint32) error {
	var f struct {
		FD         uint32
		GSI        uint32
		Flags      uint32
		ResampleFD uint32
		Pad        [16]uint8
	}
	f.FD, f.GSI, f.Flags = uint32(fd), gsi, flags
	return ioctlPtr(vm.fd, "KVM_IRQFD", kvmIRQFD, unsafe.Pointer(&f))
}

// IOEventFD flags.
const (
	IOEventFDDatamatch = 1 << 0 // KVM_IOEVENTFD_FLAG_DATAMATCH
	IOEventFDPIO       = 1 << 1 // KVM_IOEVENTFD_FLAG_PIO
	IOEventFDDeassign  = 1 << 2 // KVM_IOEVENTFD_FLAG_DEASSIGN
)

// IOEventFD makes a guest write of len bytes at addr signal eventfd fd
// instead of exiting to userspace (KVM_IOEVENTFD).
func (vm *VM) IOEventFD(fd int, addr uint64, length uint32, datamatch uint64, flags uint32) error {
	var e struct {
		Datamatch uint64
		Addr      uint64
		Len       uint32
		FD        int32
		Flags     uint32
		Pad       [36]uint8
	}
	e.Datamatch, e.Addr, e.Len, e.FD, e.Flags = datamatch, addr, length, int32(fd), flags
	return ioctlPtr(vm.fd, "KVM_IOEVENTFD", kvmIOEventFD, unsafe.Pointer(&e))
}
