package kvm

import (
	"testing"
	"unsafe"
)

// TestIoctlNumbers pins every derived ioctl number to the value
// <linux/kvm.h> gives (linux-libc-dev 6.1, printed by a C program with
// printf("%lx", KVM_...)). A wrong struct size or direction shows up here.
func TestIoctlNumbers(t *testing.T) {
	for _, tc := range pinnedNumbers {
		if tc.got != tc.want {
			t.Errorf("%s = %#x; want %#x", tc.name, tc.got, tc.want)
		}
	}
}

// TestRequestsComplete: Requests (the seccomp filter's list) is exactly
// the pinned table, name for name.
func TestRequestsComplete(t *testing.T) {
	want := map[string]uintptr{}
	for _, tc := range pinnedNumbers {
		want[tc.name] = tc.want
	}
	for _, r := range Requests {
		w, ok := want[r.Name]
		if !ok {
			t.Errorf("Requests has %s, which numbers_test.go does not pin", r.Name)
		} else if r.Nr != w {
			t.Errorf("Requests: %s = %#x; want %#x", r.Name, r.Nr, w)
		}
		delete(want, r.Name)
	}
	for name := range want {
		t.Errorf("Requests lacks %s", name)
	}
}

// pinnedNumbers are the ioctl numbers as derived here and as
// <linux/kvm.h> gives them (see TestIoctlNumbers).
var pinnedNumbers = []struct {
	name      string
	got, want uintptr
}{
	{"KVM_GET_API_VERSION", kvmGetAPIVersion, 0xae00},
	{"KVM_CREATE_VM", kvmCreateVM, 0xae01},
	{"KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList, 0xc004ae02},
	{"KVM_CHECK_EXTENSION", kvmCheckExtension, 0xae03},
	{"KVM_GET_VCPU_MMAP_SIZE", kvmGetVCPUMmapSize, 0xae04},
	{"KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID, 0xc008ae05},
	{"KVM_CREATE_VCPU", kvmCreateVCPU, 0xae41},
	{"KVM_GET_DIRTY_LOG", kvmGetDirtyLog, 0x4010ae42},
	{"KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, 0x4020ae46},
	{"KVM_SET_TSS_ADDR", kvmSetTSSAddr, 0xae47},
	{"KVM_SET_IDENTITY_MAP_ADDR", kvmSetIdentityMapAddr, 0x4008ae48},
	{"KVM_CREATE_IRQCHIP", kvmCreateIRQChip, 0xae60},
	{"KVM_IRQ_LINE", kvmIRQLine, 0x4008ae61},
	{"KVM_GET_IRQCHIP", kvmGetIRQChip, 0xc208ae62},
	{"KVM_SET_IRQCHIP", kvmSetIRQChip, 0x8208ae63},
	{"KVM_CREATE_PIT2", kvmCreatePIT2, 0x4040ae77},
	{"KVM_GET_PIT2", kvmGetPIT2, 0x8070ae9f},
	{"KVM_SET_PIT2", kvmSetPIT2, 0x4070aea0},
	{"KVM_GET_CLOCK", kvmGetClock, 0x8030ae7c},
	{"KVM_SET_CLOCK", kvmSetClock, 0x4030ae7b},
	{"KVM_IRQFD", kvmIRQFD, 0x4020ae76},
	{"KVM_IOEVENTFD", kvmIOEventFD, 0x4040ae79},
	{"KVM_ENABLE_CAP", kvmEnableCap, 0x4068aea3},
	{"KVM_RUN", kvmRun, 0xae80},
	{"KVM_GET_REGS", kvmGetRegs, 0x8090ae81},
	{"KVM_SET_REGS", kvmSetRegs, 0x4090ae82},
	{"KVM_GET_SREGS", kvmGetSregs, 0x8138ae83},
	{"KVM_SET_SREGS", kvmSetSregs, 0x4138ae84},
	{"KVM_GET_MSRS", kvmGetMSRs, 0xc008ae88},
	{"KVM_SET_MSRS", kvmSetMSRs, 0x4008ae89},
	{"KVM_GET_FPU", kvmGetFPU, 0x81a0ae8c},
	{"KVM_SET_FPU", kvmSetFPU, 0x41a0ae8d},
	{"KVM_GET_LAPIC", kvmGetLAPIC, 0x8400ae8e},
	{"KVM_SET_LAPIC", kvmSetLAPIC, 0x4400ae8f},
	{"KVM_SET_CPUID2", kvmSetCPUID2, 0x4008ae90},
	{"KVM_GET_CPUID2", kvmGetCPUID2, 0xc008ae91},
	{"KVM_GET_MP_STATE", kvmGetMPState, 0x8004ae98},
	{"KVM_SET_MP_STATE", kvmSetMPState, 0x4004ae99},
	{"KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, 0x8040ae9f},
	{"KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents, 0x4040aea0},
	{"KVM_GET_DEBUGREGS", kvmGetDebugRegs, 0x8080aea1},
	{"KVM_SET_DEBUGREGS", kvmSetDebugRegs, 0x4080aea2},
	{"KVM_GET_XSAVE", kvmGetXSave, 0x9000aea4},
	{"KVM_SET_XSAVE", kvmSetXSave, 0x5000aea5},
	{"KVM_GET_XCRS", kvmGetXCRs, 0x8188aea6},
	{"KVM_SET_XCRS", kvmSetXCRs, 0x4188aea7},
	{"KVM_KVMCLOCK_CTRL", kvmKVMClockCtrl, 0xaead},
	{"KVM_GET_TSC_KHZ", kvmGetTSCKHz, 0xaea3},
	{"KVM_SET_TSC_KHZ", kvmSetTSCKHz, 0xaea2},
}

// TestStructSizes pins the Go mirrors to sizeof(struct kvm_*) from the same
// C program.
func TestStructSizes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_regs", unsafe.Sizeof(Regs{}), 144},
		{"kvm_sregs", unsafe.Sizeof(Sregs{}), 312},
		{"kvm_segment", unsafe.Sizeof(Segment{}), 24},
		{"kvm_dtable", unsafe.Sizeof(DTable{}), 16},
		{"kvm_fpu", unsafe.Sizeof(FPU{}), 416},
		{"kvm_lapic_state", unsafe.Sizeof(LAPIC{}), 1024},
		{"kvm_xsave", unsafe.Sizeof(XSave{}), 4096},
		{"kvm_xcrs", unsafe.Sizeof(XCRs{}), 392},
		{"kvm_vcpu_events", unsafe.Sizeof(VCPUEvents{}), 64},
		{"kvm_debugregs", unsafe.Sizeof(DebugRegs{}), 128},
		{"kvm_mp_state", unsafe.Sizeof(MPState{}), 4},
		{"kvm_irqchip", unsafe.Sizeof(IRQChip{}), 520},
		{"kvm_pit_state2", unsafe.Sizeof(PITState2{}), 112},
		{"kvm_clock_data", unsafe.Sizeof(ClockData{}), 48},
		{"kvm_userspace_memory_region", unsafe.Sizeof(MemoryRegion{}), 32},
		{"kvm_cpuid_entry2", unsafe.Sizeof(CPUIDEntry{}), 40},
		{"kvm_msr_entry", unsafe.Sizeof(MSR{}), 16},
	} {
		if tc.got != tc.want {
			t.Errorf("sizeof(struct %s) = %d; want %d", tc.name, tc.got, tc.want)
		}
	}
	if o := unsafe.Offsetof(Sregs{}.InterruptBitmap); o != 280 {
		t.Errorf("offsetof(kvm_sregs, interrupt_bitmap) = %d; want 280", o)
	}
	if o := unsafe.Offsetof(Sregs{}.EFER); o != 264 {
		t.Errorf("offsetof(kvm_sregs, efer) = %d; want 264", o)
	}
}
