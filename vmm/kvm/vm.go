package kvm

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// VM is a KVM VM file descriptor. Its ioctls are safe from any goroutine.
type VM struct {
	fd      int
	sys     *System
	runSize int
}

// FD returns the VM file descriptor.
func (vm *VM) FD() int { return vm.fd }

// Close closes the VM fd. vCPU fds keep the VM alive until closed too.
func (vm *VM) Close() error { return unix.Close(vm.fd) }

// SetTSSAddr sets KVM_SET_TSS_ADDR: three pages of guest-physical space,
// outside RAM, that Intel VMX needs for real-mode emulation.
func (vm *VM) SetTSSAddr(addr uint64) error {
	_, err := ioctl(vm.fd, "KVM_SET_TSS_ADDR", kvmSetTSSAddr, uintptr(addr))
	return err
}

// SetIdentityMapAddr sets KVM_SET_IDENTITY_MAP_ADDR: one page outside RAM
// for VMX's unrestricted-guest identity page table. Call before CreateVCPU.
func (vm *VM) SetIdentityMapAddr(addr uint64) error {
	return ioctlPtr(vm.fd, "KVM_SET_IDENTITY_MAP_ADDR", kvmSetIdentityMapAddr, unsafe.Pointer(&addr))
}

// CreateVCPU creates vCPU id and maps its kvm_run page.
func (vm *VM) CreateVCPU(id int) (*VCPU, error) {
	r, err := ioctl(vm.fd, "KVM_CREATE_VCPU", kvmCreateVCPU, uintptr(id))
	if err != nil {
		return nil, err
	}
	fd := int(r)
	unix.CloseOnExec(fd)
	run, err := unix.Mmap(fd, 0, vm.runSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, &Error{Op: "mmap kvm_run", Errno: err.(unix.Errno)}
	}
	return &VCPU{fd: fd, ID: id, run: run}, nil
}

// CheckExtension is KVM_CHECK_EXTENSION on the VM fd (per-VM answers).
func (vm *VM) CheckExtension(c int) int {
	r, err := ioctl(vm.fd, "KVM_CHECK_EXTENSION", kvmCheckExtension, uintptr(c))
	if err != nil {
		return 0
	}
	return int(r)
}

// EnableCap is KVM_ENABLE_CAP on the VM fd with up to 4 arguments.
func (vm *VM) EnableCap(c uint32, args ...uint64) error {
	var ec struct {
		Cap   uint32
		Flags uint32
		Args  [4]uint64
		Pad   [64]byte
	}
	ec.Cap = c
	copy(ec.Args[:], args)
	return ioctlPtr(vm.fd, "KVM_ENABLE_CAP", kvmEnableCap, unsafe.Pointer(&ec))
}

// ClockData mirrors struct kvm_clock_data (KVM_GET_CLOCK/KVM_SET_CLOCK).
type ClockData struct {
	Clock    uint64
	Flags    uint32
	Pad0     uint32
	Realtime uint64
	HostTSC  uint64
	Pad      [4]uint32
}

// Clock flags.
const (
	ClockTSCStable = 2 // KVM_CLOCK_TSC_STABLE
	ClockRealtime  = 4 // KVM_CLOCK_REALTIME
	ClockHostTSC   = 8 // KVM_CLOCK_HOST_TSC
)

// GetClock returns the guest's kvmclock (KVM_GET_CLOCK).
func (vm *VM) GetClock() (ClockData, error) {
	var c ClockData
	err := ioctlPtr(vm.fd, "KVM_GET_CLOCK", kvmGetClock, unsafe.Pointer(&c))
	return c, err
}

// SetClock sets the guest's kvmclock (KVM_SET_CLOCK).
func (vm *VM) SetClock(c ClockData) error {
	return ioctlPtr(vm.fd, "KVM_SET_CLOCK", kvmSetClock, unsafe.Pointer(&c))
}
