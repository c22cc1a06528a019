package kvm

import (
	"runtime"
	"unsafe"
)

// MemoryRegion mirrors struct kvm_userspace_memory_region.
type MemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64 // bytes; 0 deletes the slot
	UserspaceAddr uint64
}

// Memory region flags.
const (
	MemLogDirtyPages = 1 // KVM_MEM_LOG_DIRTY_PAGES
	MemReadonly      = 2 // KVM_MEM_READONLY
)

// SetUserMemoryRegion creates, moves or deletes a memory slot
// (KVM_SET_USER_MEMORY_REGION).
func (vm *VM) SetUserMemoryRegion(r MemoryRegion) error {
	return ioctlPtr(vm.fd, "KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, unsafe.Pointer(&r))
}

// DirtyLog fetches and clears slot's dirty bitmap (KVM_GET_DIRTY_LOG); bitmap
// must hold one bit per page of the slot, rounded up to 64 bits.
func (vm *VM) DirtyLog(slot uint32, bitmap []uint64) error {
	var d struct {
		Slot   uint32
		Pad    uint32
		Bitmap uint64
	}
	// The kernel writes through a pointer stored in d, which no stack
	// copy would adjust: use a heap buffer (never moved), kept alive
	// across the call.
	buf := make([]uint64, len(bitmap))
	d.Slot = slot
	d.Bitmap = uint64(uintptr(unsafe.Pointer(&buf[0])))
	err := ioctlPtr(vm.fd, "KVM_GET_DIRTY_LOG", kvmGetDirtyLog, unsafe.Pointer(&d))
	runtime.KeepAlive(buf)
	copy(bitmap, buf)
	return err
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
