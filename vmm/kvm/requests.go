package kvm

// Request is one ioctl request this package issues: its linux/kvm.h name
// and number.
type Request struct {
	Name string
	Nr   uintptr
}

// Requests lists every ioctl request the package issues, for a seccomp
// filter that allows only these (vmm/vmmproc/seccomp.go). numbers_test.go checks
// that it matches the numbers pinned against linux/kvm.h, so a new ioctl
// cannot be added here or there alone.
var Requests = []Request{
	{"KVM_GET_API_VERSION", kvmGetAPIVersion},
	{"KVM_CREATE_VM", kvmCreateVM},
	{"KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList},
	{"KVM_CHECK_EXTENSION", kvmCheckExtension},
	{"KVM_GET_VCPU_MMAP_SIZE", kvmGetVCPUMmapSize},
	{"KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID},
	{"KVM_CREATE_VCPU", kvmCreateVCPU},
	{"KVM_GET_DIRTY_LOG", kvmGetDirtyLog},
	{"KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion},
	{"KVM_SET_TSS_ADDR", kvmSetTSSAddr},
	{"KVM_SET_IDENTITY_MAP_ADDR", kvmSetIdentityMapAddr},
	{"KVM_CREATE_IRQCHIP", kvmCreateIRQChip},
	{"KVM_IRQ_LINE", kvmIRQLine},
	{"KVM_GET_IRQCHIP", kvmGetIRQChip},
	{"KVM_SET_IRQCHIP", kvmSetIRQChip},
	{"KVM_CREATE_PIT2", kvmCreatePIT2},
	{"KVM_GET_PIT2", kvmGetPIT2},
	{"KVM_SET_PIT2", kvmSetPIT2},
	{"KVM_GET_CLOCK", kvmGetClock},
	{"KVM_SET_CLOCK", kvmSetClock},
	{"KVM_IRQFD", kvmIRQFD},
	{"KVM_IOEVENTFD", kvmIOEventFD},
	{"KVM_ENABLE_CAP", kvmEnableCap},
	{"KVM_RUN", kvmRun},
	{"KVM_GET_REGS", kvmGetRegs},
	{"KVM_SET_REGS", kvmSetRegs},
	{"KVM_GET_SREGS", kvmGetSregs},
	{"KVM_SET_SREGS", kvmSetSregs},
	{"KVM_GET_MSRS", kvmGetMSRs},
	{"KVM_SET_MSRS", kvmSetMSRs},
	{"KVM_GET_FPU", kvmGetFPU},
	{"KVM_SET_FPU", kvmSetFPU},
	{"KVM_GET_LAPIC", kvmGetLAPIC},
	{"KVM_SET_LAPIC", kvmSetLAPIC},
	{"KVM_SET_CPUID2", kvmSetCPUID2},
	{"KVM_GET_CPUID2", kvmGetCPUID2},
	{"KVM_GET_MP_STATE", kvmGetMPState},
	{"KVM_SET_MP_STATE", kvmSetMPState},
	{"KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents},
	{"KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents},
	{"KVM_GET_DEBUGREGS", kvmGetDebugRegs},
	{"KVM_SET_DEBUGREGS", kvmSetDebugRegs},
	{"KVM_GET_XSAVE", kvmGetXSave},
	{"KVM_SET_XSAVE", kvmSetXSave},
	{"KVM_GET_XCRS", kvmGetXCRs},
	{"KVM_SET_XCRS", kvmSetXCRs},
	{"KVM_KVMCLOCK_CTRL", kvmKVMClockCtrl},
	{"KVM_GET_TSC_KHZ", kvmGetTSCKHz},
	{"KVM_SET_TSC_KHZ", kvmSetTSCKHz},
}
