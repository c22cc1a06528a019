package kvm

import "unsafe"

// Regs mirrors struct kvm_regs.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment mirrors struct kvm_segment.
type Segment struct {
	Base                           uint64
	Limit                          uint32
	Selector                       uint16
	Type                           uint8
	Present, DPL, DB, S, L, G, AVL uint8
	Unusable                       uint8
	Padding                        uint8
}

// DTable mirrors struct kvm_dtable.
type DTable struct {
	Base    uint64
	Limit   uint16
	Padding [3]uint16
}

// Sregs mirrors struct kvm_sregs.
type Sregs struct {
	CS, DS, ES, FS, GS, SS  Segment
	TR, LDT                 Segment
	GDT, IDT                DTable
	CR0, CR2, CR3, CR4, CR8 uint64
	EFER                    uint64
	APICBase                uint64
	InterruptBitmap         [4]uint64
}

// FPU mirrors struct kvm_fpu.
type FPU struct {
	FPR        [8][16]uint8
	FCW        uint16
	FSW        uint16
	FTWX       uint8
	Pad1       uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	Pad2       uint32
}

// LAPIC mirrors struct kvm_lapic_state: the local APIC register page.
type LAPIC struct {
	Regs [1024]byte
}

// MPState mirrors struct kvm_mp_state.
type MPState struct {
	State uint32
}

// MP states.
const (
	MPStateRunnable      = 0 // KVM_MP_STATE_RUNNABLE
	MPStateUninitialized = 1 // KVM_MP_STATE_UNINITIALIZED
	MPStateInitReceived  = 2 // KVM_MP_STATE_INIT_RECEIVED
	MPStateHalted        = 3 // KVM_MP_STATE_HALTED
	MPStateSIPIReceived  = 4 // KVM_MP_STATE_SIPI_RECEIVED
)

// VCPUEvents is struct kvm_vcpu_events, kept opaque: it is only saved and
// restored as a whole (its flags from GET say which parts are valid).
type VCPUEvents struct {
	Raw [64]byte
}

// DebugRegs is struct kvm_debugregs, opaque.
type DebugRegs struct {
	Raw [128]byte
}

// XSave is struct kvm_xsave (the legacy 4 KiB region), opaque.
type XSave struct {
	Region [1024]uint32
}

// XCR is one struct kvm_xcr.
type XCR struct {
	XCR      uint32
	Reserved uint32
	Value    uint64
}

// XCRs mirrors struct kvm_xcrs.
type XCRs struct {
	NrXCRs  uint32
	Flags   uint32
	XCRs    [16]XCR
	Padding [16]uint64
}

func (c *VCPU) get(name string, req uintptr, p unsafe.Pointer) error {
	return ioctlPtr(c.fd, name, req, p)
}

// GetRegs is KVM_GET_REGS.
func (c *VCPU) GetRegs() (r Regs, err error) {
	return r, c.get("KVM_GET_REGS", kvmGetRegs, unsafe.Pointer(&r))
}

// SetRegs is KVM_SET_REGS.
func (c *VCPU) SetRegs(r Regs) error {
	return c.get("KVM_SET_REGS", kvmSetRegs, unsafe.Pointer(&r))
}

// GetSregs is KVM_GET_SREGS.
func (c *VCPU) GetSregs() (s Sregs, err error) {
	return s, c.get("KVM_GET_SREGS", kvmGetSregs, unsafe.Pointer(&s))
}

// SetSregs is KVM_SET_SREGS.
func (c *VCPU) SetSregs(s Sregs) error {
	return c.get("KVM_SET_SREGS", kvmSetSregs, unsafe.Pointer(&s))
}

// GetFPU is KVM_GET_FPU.
func (c *VCPU) GetFPU() (f FPU, err error) {
	return f, c.get("KVM_GET_FPU", kvmGetFPU, unsafe.Pointer(&f))
}

// SetFPU is KVM_SET_FPU.
func (c *VCPU) SetFPU(f FPU) error {
	return c.get("KVM_SET_FPU", kvmSetFPU, unsafe.Pointer(&f))
}

// GetLAPIC is KVM_GET_LAPIC.
func (c *VCPU) GetLAPIC() (l LAPIC, err error) {
	return l, c.get("KVM_GET_LAPIC", kvmGetLAPIC, unsafe.Pointer(&l))
}

// SetLAPIC is KVM_SET_LAPIC.
func (c *VCPU) SetLAPIC(l LAPIC) error {
	return c.get("KVM_SET_LAPIC", kvmSetLAPIC, unsafe.Pointer(&l))
}

// GetMPState is KVM_GET_MP_STATE.
func (c *VCPU) GetMPState() (m MPState, err error) {
	return m, c.get("KVM_GET_MP_STATE", kvmGetMPState, unsafe.Pointer(&m))
}

// SetMPState is KVM_SET_MP_STATE.
func (c *VCPU) SetMPState(m MPState) error {
	return c.get("KVM_SET_MP_STATE", kvmSetMPState, unsafe.Pointer(&m))
}

// GetVCPUEvents is KVM_GET_VCPU_EVENTS.
func (c *VCPU) GetVCPUEvents() (e VCPUEvents, err error) {
	return e, c.get("KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, unsafe.Pointer(&e))
}

// SetVCPUEvents is KVM_SET_VCPU_EVENTS.
func (c *VCPU) SetVCPUEvents(e VCPUEvents) error {
	return c.get("KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents, unsafe.Pointer(&e))
}

// GetDebugRegs is KVM_GET_DEBUGREGS.
func (c *VCPU) GetDebugRegs() (d DebugRegs, err error) {
	return d, c.get("KVM_GET_DEBUGREGS", kvmGetDebugRegs, unsafe.Pointer(&d))
}

// SetDebugRegs is KVM_SET_DEBUGREGS.
func (c *VCPU) SetDebugRegs(d DebugRegs) error {
	return c.get("KVM_SET_DEBUGREGS", kvmSetDebugRegs, unsafe.Pointer(&d))
}

// GetXSave is KVM_GET_XSAVE.
func (c *VCPU) GetXSave() (x XSave, err error) {
	return x, c.get("KVM_GET_XSAVE", kvmGetXSave, unsafe.Pointer(&x))
}

// SetXSave is KVM_SET_XSAVE.
func (c *VCPU) SetXSave(x XSave) error {
	return c.get("KVM_SET_XSAVE", kvmSetXSave, unsafe.Pointer(&x))
}

// GetXCRs is KVM_GET_XCRS.
func (c *VCPU) GetXCRs() (x XCRs, err error) {
	return x, c.get("KVM_GET_XCRS", kvmGetXCRs, unsafe.Pointer(&x))
}

// SetXCRs is KVM_SET_XCRS.
func (c *VCPU) SetXCRs(x XCRs) error {
	return c.get("KVM_SET_XCRS", kvmSetXCRs, unsafe.Pointer(&x))
}

// KVMClockCtrl tells KVM the guest was paused (KVM_KVMCLOCK_CTRL), so its
// soft-lockup watchdog does not fire after a long pause. EINVAL when the
// guest has no kvmclock.
func (c *VCPU) KVMClockCtrl() error {
	_, err := ioctl(c.fd, "KVM_KVMCLOCK_CTRL", kvmKVMClockCtrl, 0)
	return err
}
