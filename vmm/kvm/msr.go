package kvm

import (
	"fmt"
	"unsafe"
)

// MSR is one struct kvm_msr_entry.
type MSR struct {
	Index    uint32
	Reserved uint32
	Data     uint64
}

// Well-known MSR numbers (arch/x86/include/asm/msr-index.h).
const (
	MSRIA32TSC           = 0x00000010 // MSR_IA32_TSC
	MSRIA32SysenterCS    = 0x00000174 // MSR_IA32_SYSENTER_CS
	MSRIA32SysenterESP   = 0x00000175 // MSR_IA32_SYSENTER_ESP
	MSRIA32SysenterEIP   = 0x00000176 // MSR_IA32_SYSENTER_EIP
	MSRIA32MiscEnable    = 0x000001a0 // MSR_IA32_MISC_ENABLE
	MSRMTRRDefType       = 0x000002ff // MSR_MTRRdefType
	MSRIA32TSCDeadline   = 0x000006e0 // MSR_IA32_TSC_DEADLINE
	MSRSTAR              = 0xc0000081 // MSR_STAR
	MSRLSTAR             = 0xc0000082 // MSR_LSTAR
	MSRCSTAR             = 0xc0000083 // MSR_CSTAR
	MSRSyscallMask       = 0xc0000084 // MSR_SYSCALL_MASK
	MSRKernelGSBase      = 0xc0000102 // MSR_KERNEL_GS_BASE
	MiscEnableFastString = 1          // MSR_IA32_MISC_ENABLE_FAST_STRING
)

func (c *VCPU) msrs(name string, req uintptr, ms []MSR) (int, error) {
	if len(ms) == 0 {
		return 0, nil
	}
	buf := make([]byte, 8+len(ms)*16)
	*(*uint32)(unsafe.Pointer(&buf[0])) = uint32(len(ms))
	ents := unsafe.Slice((*MSR)(unsafe.Pointer(&buf[8])), len(ms))
	copy(ents, ms)
	r, err := ioctlPtrN(c.fd, name, req, unsafe.Pointer(&buf[0]))
	copy(ms, ents)
	return int(r), err
}

// GetMSRs reads ms[i].Data for each ms[i].Index (KVM_GET_MSRS) and returns
// how many were read; reading stops at the first MSR KVM refuses.
func (c *VCPU) GetMSRs(ms []MSR) (int, error) {
	return c.msrs("KVM_GET_MSRS", kvmGetMSRs, ms)
}

// SetMSRs writes ms (KVM_SET_MSRS); all must be accepted.
func (c *VCPU) SetMSRs(ms []MSR) error {
	n, err := c.msrs("KVM_SET_MSRS", kvmSetMSRs, ms)
	if err != nil {
		return err
	}
	if n != len(ms) {
		return fmt.Errorf("KVM_SET_MSRS: set %d of %d, refused MSR %#x", n, len(ms), ms[n].Index)
	}
	return nil
}

// ReadableMSRs reads every MSR in indices, dropping those KVM refuses
// (KVM_GET_MSR_INDEX_LIST names MSRs this CPU model may not have).
func (c *VCPU) ReadableMSRs(indices []uint32) ([]MSR, error) {
	ms := make([]MSR, len(indices))
	for i, idx := range indices {
		ms[i].Index = idx
	}
	out := make([]MSR, 0, len(ms))
	for len(ms) > 0 {
		n, err := c.GetMSRs(ms)
		if err != nil {
			return nil, err
		}
		out = append(out, ms[:n]...)
		if n < len(ms) {
			n++ // skip the refused one
		}
		ms = ms[n:]
	}
	return out, nil
}
