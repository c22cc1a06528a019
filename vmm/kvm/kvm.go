// Package kvm wraps the Linux KVM API (Documentation/virt/kvm/api.rst) with
// golang.org/x/sys/unix ioctls. One file per family: system.go (/dev/kvm),
// vm.go (a VM fd), vcpu.go (a vCPU fd and its kvm_run page), memory.go,
// registers.go, irq.go, cpuid.go, msr.go.
//
// x/sys has no KVM ioctl numbers, so they are derived here the way
// <asm-generic/ioctl.h> does (_IO/_IOR/_IOW/_IOWR over the struct sizes) and
// pinned against linux/kvm.h by numbers_test.go.
//
// Errors: every wrapper returns the raw errno wrapped with the ioctl's
// kernel name ("KVM_RUN: interrupted system call"); callers test with
// errors.Is(err, unix.EINTR). KVM_RUN is never retried here: its EINTR is how
// a kicked vCPU reaches the run loop. KVM_CREATE_VM runs with
// signals blocked instead (System.CreateVM).
package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl number encoding, <asm-generic/ioctl.h>.
const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2

	kvmio = 0xAE // KVMIO
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | kvmio<<8 | nr
}
func io(nr uintptr) uintptr         { return ioc(iocNone, nr, 0) }
func ior(nr, size uintptr) uintptr  { return ioc(iocRead, nr, size) }
func iow(nr, size uintptr) uintptr  { return ioc(iocWrite, nr, size) }
func iowr(nr, size uintptr) uintptr { return ioc(iocRead|iocWrite, nr, size) }

// Sizes of the kernel structs that appear in ioctl numbers (checked against
// unsafe.Sizeof of the Go mirrors in numbers_test.go).
const (
	sizeU64        = 8
	sizeMSRList    = 4  // struct kvm_msr_list (header)
	sizeCPUID2     = 8  // struct kvm_cpuid2 (header)
	sizeMSRs       = 8  // struct kvm_msrs (header)
	sizeDirtyLog   = 16 // struct kvm_dirty_log
	sizeMemRegion  = 32 // struct kvm_userspace_memory_region
	sizeIRQLevel   = 8  // struct kvm_irq_level
	sizeIRQChip    = 520
	sizePITConfig  = 64
	sizePITState2  = 112
	sizeClockData  = 48
	sizeIRQFD      = 32
	sizeIOEventFD  = 64
	sizeEnableCap  = 104
	sizeRegs       = 144
	sizeSregs      = 312
	sizeFPU        = 416
	sizeLAPIC      = 1024
	sizeMPState    = 4
	sizeVCPUEvents = 64
	sizeDebugRegs  = 128
	sizeXSave      = 4096
	sizeXCRs       = 392
)

// ioctl numbers, named after linux/kvm.h.
var (
	kvmGetAPIVersion       = io(0x00)                  // KVM_GET_API_VERSION
	kvmCreateVM            = io(0x01)                  // KVM_CREATE_VM
	kvmGetMSRIndexList     = iowr(0x02, sizeMSRList)   // KVM_GET_MSR_INDEX_LIST
	kvmCheckExtension      = io(0x03)                  // KVM_CHECK_EXTENSION
	kvmGetVCPUMmapSize     = io(0x04)                  // KVM_GET_VCPU_MMAP_SIZE
	kvmGetSupportedCPUID   = iowr(0x05, sizeCPUID2)    // KVM_GET_SUPPORTED_CPUID
	kvmCreateVCPU          = io(0x41)                  // KVM_CREATE_VCPU
	kvmGetDirtyLog         = iow(0x42, sizeDirtyLog)   // KVM_GET_DIRTY_LOG
	kvmSetUserMemoryRegion = iow(0x46, sizeMemRegion)  // KVM_SET_USER_MEMORY_REGION
	kvmSetTSSAddr          = io(0x47)                  // KVM_SET_TSS_ADDR
	kvmSetIdentityMapAddr  = iow(0x48, sizeU64)        // KVM_SET_IDENTITY_MAP_ADDR
	kvmCreateIRQChip       = io(0x60)                  // KVM_CREATE_IRQCHIP
	kvmIRQLine             = iow(0x61, sizeIRQLevel)   // KVM_IRQ_LINE
	kvmGetIRQChip          = iowr(0x62, sizeIRQChip)   // KVM_GET_IRQCHIP
	kvmSetIRQChip          = ior(0x63, sizeIRQChip)    // KVM_SET_IRQCHIP (sic: _IOR in kvm.h)
	kvmIRQFD               = iow(0x76, sizeIRQFD)      // KVM_IRQFD
	kvmCreatePIT2          = iow(0x77, sizePITConfig)  // KVM_CREATE_PIT2
	kvmIOEventFD           = iow(0x79, sizeIOEventFD)  // KVM_IOEVENTFD
	kvmSetClock            = iow(0x7b, sizeClockData)  // KVM_SET_CLOCK
	kvmGetClock            = ior(0x7c, sizeClockData)  // KVM_GET_CLOCK
	kvmGetPIT2             = ior(0x9f, sizePITState2)  // KVM_GET_PIT2
	kvmSetPIT2             = iow(0xa0, sizePITState2)  // KVM_SET_PIT2
	kvmSetTSCKHz           = io(0xa2)                  // KVM_SET_TSC_KHZ
	kvmGetTSCKHz           = io(0xa3)                  // KVM_GET_TSC_KHZ
	kvmEnableCap           = iow(0xa3, sizeEnableCap)  // KVM_ENABLE_CAP
	kvmRun                 = io(0x80)                  // KVM_RUN
	kvmGetRegs             = ior(0x81, sizeRegs)       // KVM_GET_REGS
	kvmSetRegs             = iow(0x82, sizeRegs)       // KVM_SET_REGS
	kvmGetSregs            = ior(0x83, sizeSregs)      // KVM_GET_SREGS
	kvmSetSregs            = iow(0x84, sizeSregs)      // KVM_SET_SREGS
	kvmGetMSRs             = iowr(0x88, sizeMSRs)      // KVM_GET_MSRS
	kvmSetMSRs             = iow(0x89, sizeMSRs)       // KVM_SET_MSRS
	kvmGetFPU              = ior(0x8c, sizeFPU)        // KVM_GET_FPU
	kvmSetFPU              = iow(0x8d, sizeFPU)        // KVM_SET_FPU
	kvmGetLAPIC            = ior(0x8e, sizeLAPIC)      // KVM_GET_LAPIC
	kvmSetLAPIC            = iow(0x8f, sizeLAPIC)      // KVM_SET_LAPIC
	kvmSetCPUID2           = iow(0x90, sizeCPUID2)     // KVM_SET_CPUID2
	kvmGetCPUID2           = iowr(0x91, sizeCPUID2)    // KVM_GET_CPUID2
	kvmGetMPState          = ior(0x98, sizeMPState)    // KVM_GET_MP_STATE
	kvmSetMPState          = iow(0x99, sizeMPState)    // KVM_SET_MP_STATE
	kvmGetVCPUEvents       = ior(0x9f, sizeVCPUEvents) // KVM_GET_VCPU_EVENTS
	kvmSetVCPUEvents       = iow(0xa0, sizeVCPUEvents) // KVM_SET_VCPU_EVENTS
	kvmGetDebugRegs        = ior(0xa1, sizeDebugRegs)  // KVM_GET_DEBUGREGS
	kvmSetDebugRegs        = iow(0xa2, sizeDebugRegs)  // KVM_SET_DEBUGREGS
	kvmGetXSave            = ior(0xa4, sizeXSave)      // KVM_GET_XSAVE
	kvmSetXSave            = iow(0xa5, sizeXSave)      // KVM_SET_XSAVE
	kvmGetXCRs             = ior(0xa6, sizeXCRs)       // KVM_GET_XCRS
	kvmSetXCRs             = iow(0xa7, sizeXCRs)       // KVM_SET_XCRS
	kvmKVMClockCtrl        = io(0xad)                  // KVM_KVMCLOCK_CTRL
)

// ioctl issues one ioctl with a plain integer argument (never a pointer
// converted to uintptr: use ioctlPtr) and wraps a failure with name.
func ioctl(fd int, name string, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return r, &Error{Op: name, Errno: e}
	}
	return r, nil
}

// ioctlPtr issues an ioctl whose argument points to memory the kernel
// reads or writes. The pointer must stay an unsafe.Pointer until it is
// converted inside the argument list of unix.Syscall itself (nosplit,
// uintptrkeepalive): converted earlier and passed through an ordinary Go
// function, a stack growth in that function's prologue moves a stack
// struct and the kernel then uses the old, freed stack (GET results lost,
// SET and KVM_IRQ_LINE arguments read from reused memory). See
// TestIoctlPtrStackMove and the unsafe.Pointer rules, case (4).
func ioctlPtr(fd int, name string, req uintptr, p unsafe.Pointer) error {
	_, err := ioctlPtrN(fd, name, req, p)
	return err
}

// ioctlPtrN is ioctlPtr returning the ioctl's result as well.
func ioctlPtrN(fd int, name string, req uintptr, p unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(p))
	if e != 0 {
		return r, &Error{Op: name, Errno: e}
	}
	return r, nil
}

// Error is a failed KVM ioctl: the kernel's name for it and the errno.
type Error struct {
	Op    string
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Op, e.Errno) }

// Unwrap lets errors.Is(err, unix.EINTR) see the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Capabilities (KVM_CAP_*), for CheckExtension.
const (
	CapIRQChip          = 0   // KVM_CAP_IRQCHIP
	CapUserMemory       = 3   // KVM_CAP_USER_MEMORY
	CapNrVCPUs          = 9   // KVM_CAP_NR_VCPUS
	CapMPState          = 14  // KVM_CAP_MP_STATE
	CapIRQFD            = 32  // KVM_CAP_IRQFD
	CapPIT2             = 33  // KVM_CAP_PIT2
	CapPITState2        = 35  // KVM_CAP_PIT_STATE2
	CapIOEventFD        = 36  // KVM_CAP_IOEVENTFD
	CapAdjustClock      = 39  // KVM_CAP_ADJUST_CLOCK
	CapVCPUEvents       = 41  // KVM_CAP_VCPU_EVENTS
	CapDebugRegs        = 50  // KVM_CAP_DEBUGREGS
	CapXSave            = 55  // KVM_CAP_XSAVE
	CapXCRs             = 56  // KVM_CAP_XCRS
	CapTSCControl       = 60  // KVM_CAP_TSC_CONTROL
	CapGetTSCKHz        = 61  // KVM_CAP_GET_TSC_KHZ
	CapMaxVCPUs         = 66  // KVM_CAP_MAX_VCPUS
	CapTSCDeadlineTimer = 72  // KVM_CAP_TSC_DEADLINE_TIMER
	CapKVMClockCtrl     = 76  // KVM_CAP_KVMCLOCK_CTRL
	CapImmediateExit    = 136 // KVM_CAP_IMMEDIATE_EXIT
)

// Required lists the capabilities the sandfs VMM cannot run without: the
// machine refuses to start without them and the host probe (vmm/probe)
// sends guests to the lab when KVM lacks one.
var Required = []struct {
	Cap  int
	Name string
}{
	{CapIRQChip, "KVM_CAP_IRQCHIP"},
	{CapUserMemory, "KVM_CAP_USER_MEMORY"},
	{CapPIT2, "KVM_CAP_PIT2"},
	{CapImmediateExit, "KVM_CAP_IMMEDIATE_EXIT"},
	{CapXSave, "KVM_CAP_XSAVE"},
	{CapVCPUEvents, "KVM_CAP_VCPU_EVENTS"},
}
