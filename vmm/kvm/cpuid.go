package kvm

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CPUIDEntry mirrors struct kvm_cpuid_entry2.
type CPUIDEntry struct {
	Function uint32
	Index    uint32
	Flags    uint32
	EAX      uint32
	EBX      uint32
	ECX      uint32
	EDX      uint32
	Padding  [3]uint32
}

// CPUID entry flags.
const (
	CPUIDFlagSignificantIndex = 1 // KVM_CPUID_FLAG_SIGNIFCANT_INDEX
)

// maxCPUIDEntries bounds the KVM_GET_SUPPORTED_CPUID buffer (E2BIG grows it).
const maxCPUIDEntries = 256

func getCPUID(fd int, name string, req uintptr) ([]CPUIDEntry, error) {
	for n := maxCPUIDEntries; n <= 4*maxCPUIDEntries; n *= 2 {
		buf := make([]byte, 8+n*int(unsafe.Sizeof(CPUIDEntry{})))
		*(*uint32)(unsafe.Pointer(&buf[0])) = uint32(n)
		err := ioctlPtr(fd, name, req, unsafe.Pointer(&buf[0]))
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, err
		}
		got := int(*(*uint32)(unsafe.Pointer(&buf[0])))
		ents := unsafe.Slice((*CPUIDEntry)(unsafe.Pointer(&buf[8])), got)
		return append([]CPUIDEntry(nil), ents...), nil
	}
	return nil, &Error{Op: name, Errno: unix.E2BIG}
}

// SetCPUID2 sets the vCPU's CPUID table (KVM_SET_CPUID2).
func (c *VCPU) SetCPUID2(ents []CPUIDEntry) error {
	buf := make([]byte, 8+len(ents)*int(unsafe.Sizeof(CPUIDEntry{})))
	*(*uint32)(unsafe.Pointer(&buf[0])) = uint32(len(ents))
	if len(ents) > 0 {
		copy(unsafe.Slice((*CPUIDEntry)(unsafe.Pointer(&buf[8])), len(ents)), ents)
	}
	return ioctlPtr(c.fd, "KVM_SET_CPUID2", kvmSetCPUID2, unsafe.Pointer(&buf[0]))
}

// GetCPUID2 returns the vCPU's CPUID table as KVM holds it (KVM_GET_CPUID2).
func (c *VCPU) GetCPUID2() ([]CPUIDEntry, error) {
	return getCPUID(c.fd, "KVM_GET_CPUID2", kvmGetCPUID2)
}
