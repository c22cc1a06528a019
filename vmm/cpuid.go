package vmm

import "sandfs/vmm/kvm"

// CPUID policy, applied to KVM_GET_SUPPORTED_CPUID before KVM_SET_CPUID2.
// References: Firecracker src/vmm/src/cpu_config/x86_64/cpuid/normalize.rs,
// the Intel SDM vol. 2A "CPUID", and shared/reference/kernel-and-lab-notes.md.
const (
	leafFeatures   = 0x1
	leafExtFeat    = 0x7
	leafTopology   = 0xb
	leafXSave      = 0xd
	leafV2Topo     = 0x1f
	leafKVMSig     = 0x40000000
	leafKVMFeat    = 0x40000001
	leafAMDExt     = 0x80000001
	leafAMDTopo    = 0x8000001e
	ecxHypervisor  = 1 << 31 // CPUID.1:ECX[31]: running under a hypervisor
	ecxTSCDeadline = 1 << 24 // CPUID.1:ECX[24]: LAPIC TSC-deadline timer mode
	ecxVMX         = 1 << 5  // CPUID.1:ECX[5]
	ecxOSXSAVE     = 1 << 27
	ecxAVX         = 1 << 28
	ecxXSAVE       = 1 << 26
	ecxSVM         = 1 << 2 // CPUID.80000001:ECX[2]
	// KVM paravirtual features (CPUID 0x40000001:EAX) the guest is not
	// offered: asynchronous page faults (Documentation/virt/kvm/x86/cpuid.rst).
	kvmFeatAsyncPF       = 1 << 4
	kvmFeatAsyncPFVMExit = 1 << 10
	kvmFeatAsyncPFInt    = 1 << 14
	ebx7AVX512F          = 1 << 16
	ebx7MPX              = 1 << 14
	ecx7PKU              = 1 << 3
)

// kvmSignature is "KVMKVMKVM\0\0\0" as EBX, ECX, EDX.
var kvmSignature = [3]uint32{0x4b4d564b, 0x564b4d56, 0x0000004d}

func findCPUID(ents []kvm.CPUIDEntry, fn, idx uint32) *kvm.CPUIDEntry {
	for i := range ents {
		e := &ents[i]
		if e.Function == fn && (e.Flags&kvm.CPUIDFlagSignificantIndex == 0 || e.Index == idx) {
			return e
		}
	}
	return nil
}

// normalizeCPUID returns the CPUID table for vCPU id of cpus, from the table
// KVM supports:
//   - the hypervisor bit (without it Linux finds no kvmclock, calibrates the
//     TSC against the PIT and waits 1 s for the RTC);
//   - the KVM signature leaf 0x40000000;
//   - no asynchronous page faults (KVM's paravirtual feature bits 4, 10
//     and 14): with them, a guest task whose page the host has not
//     faulted in yet sleeps until KVM tells the guest the page is ready.
//     Restored guests fault their memory in from the snapshot files, and
//     two restored from one snapshot contend for the same pages, so they
//     are where async faults happen; a restored task waiting for a "page
//     ready" that never comes hangs for good (Firecracker issue 3020;
//     Firecracker turns the feature off on AMD, libkrun and Cloud
//     Hypervisor off altogether). The lab's clones that stalled or reset
//     were all a second restore of one snapshot beside the first;
//     docs/lab.md;
//   - the vCPU's APIC ID in leaves 0x1, 0xb, 0x1f and 0x8000001e;
//   - no VMX/SVM: sandbox guests do not nest;
//   - leaf 0xd consistent with the features left: XCR0 bits only for
//     features the guest sees, sizes recomputed from the sub-leaves
//     (otherwise: "XSAVE consistency problem").
func normalizeCPUID(supported []kvm.CPUIDEntry, id, cpus int) []kvm.CPUIDEntry {
	ents := append([]kvm.CPUIDEntry(nil), supported...)
	if e := findCPUID(ents, leafFeatures, 0); e != nil {
		e.ECX |= ecxHypervisor
		e.ECX &^= ecxVMX
		e.EBX = e.EBX&0x0000ffff | uint32(id)<<24 | uint32(cpus)<<16
	}
	if e := findCPUID(ents, leafAMDExt, 0); e != nil {
		e.ECX &^= ecxSVM
	}
	for i := range ents {
		e := &ents[i]
		switch e.Function {
		case leafTopology, leafV2Topo:
			e.EDX = uint32(id)
		case leafAMDTopo:
			e.EAX = uint32(id)
		}
	}
	if e := findCPUID(ents, leafKVMSig, 0); e != nil {
		e.EBX, e.ECX, e.EDX = kvmSignature[0], kvmSignature[1], kvmSignature[2]
		if e.EAX < leafKVMFeat {
			e.EAX = leafKVMFeat
		}
	} else {
		ents = append(ents, kvm.CPUIDEntry{Function: leafKVMSig, EAX: leafKVMFeat,
			EBX: kvmSignature[0], ECX: kvmSignature[1], EDX: kvmSignature[2]})
	}
	if e := findCPUID(ents, leafKVMFeat, 0); e != nil {
		e.EAX &^= kvmFeatAsyncPF | kvmFeatAsyncPFVMExit | kvmFeatAsyncPFInt
	}
	normalizeXSave(ents)
	return ents
}

// XCR0 feature bits and the CPUID bit each depends on.
func xcr0Allowed(ents []kvm.CPUIDEntry) uint64 {
	allowed := uint64(0x3) // x87, SSE
	f1 := findCPUID(ents, leafFeatures, 0)
	if f1 == nil || f1.ECX&ecxXSAVE == 0 {
		return allowed
	}
	if f1.ECX&ecxAVX != 0 {
		allowed |= 1 << 2
	}
	f7 := findCPUID(ents, leafExtFeat, 0)
	if f7 != nil {
		if f7.EBX&ebx7MPX != 0 {
			allowed |= 1<<3 | 1<<4
		}
		if f7.EBX&ebx7AVX512F != 0 {
			allowed |= 1<<5 | 1<<6 | 1<<7
		}
		if f7.ECX&ecx7PKU != 0 {
			allowed |= 1 << 9
		}
	}
	// Bits 17, 18 (AMX) and others are dynamic or supervisor state: off.
	return allowed
}

func normalizeXSave(ents []kvm.CPUIDEntry) {
	d0 := findCPUID(ents, leafXSave, 0)
	if d0 == nil {
		return
	}
	mask := (uint64(d0.EDX)<<32 | uint64(d0.EAX)) & xcr0Allowed(ents)
	d0.EAX, d0.EDX = uint32(mask), uint32(mask>>32)
	size := uint32(512 + 64) // legacy area + XSAVE header
	for i := range ents {
		e := &ents[i]
		if e.Function != leafXSave || e.Index < 2 || e.Index >= 63 {
			continue
		}
		if mask&(1<<e.Index) == 0 {
			e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
			continue
		}
		if end := e.EBX + e.EAX; end > size { // offset + size
			size = end
		}
	}
	d0.EBX, d0.ECX = size, size
	if d1 := findCPUID(ents, leafXSave, 1); d1 != nil {
		d1.ECX, d1.EDX = 0, 0 // no supervisor states (IA32_XSS)
	}
}

// addTSCDeadline advertises the LAPIC's TSC-deadline mode (CPUID.1:ECX[24]),
// which KVM's in-kernel LAPIC emulates (KVM_CAP_TSC_DEADLINE_TIMER) but
// KVM_GET_SUPPORTED_CPUID leaves out; Firecracker and QEMU set it too.
// With it Linux skips calibrate_APIC_clock: without it, the guest measures
// the LAPIC timer against the TSC and then waits for 25 periodic LAPIC
// timer ticks; on a loaded, emulated host (the lab) the measurement can be
// badly off and the guest hangs silently in setup_boot_APIC_clock (seen in
// the boot soak, TestBootLoop).
func addTSCDeadline(ents []kvm.CPUIDEntry) []kvm.CPUIDEntry {
	ents = append([]kvm.CPUIDEntry(nil), ents...)
	if e := findCPUID(ents, leafFeatures, 0); e != nil {
		e.ECX |= ecxTSCDeadline
	}
	return ents
}
