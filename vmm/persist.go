package vmm

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"sandfs/vmm/kvm"
	"sandfs/vmm/serial"
)

// StateVersion is the version of State's encoding that EncodeState
// writes (statecodec.go); DecodeState reads it and version 1, Restore
// refuses others.
const StateVersion = 2

// State is everything of a paused machine except guest RAM: the VM's
// interrupt controllers, PIT and clock, each vCPU, the serial port, and the
// devices' states by name. EncodeState and DecodeState read and write it.
type State struct {
	Version  int
	MemBytes uint64
	CPUs     int
	Cmdline  string
	VM       VMState
	VCPUs    []VCPUState
	Serial   serial.State
	Devices  map[string]json.RawMessage `json:",omitempty"`
}

// VMState is the VM-wide KVM state. Opaque kernel structs are raw bytes.
type VMState struct {
	PICMaster []byte // struct kvm_irqchip, chip 0
	PICSlave  []byte // chip 1
	IOAPIC    []byte // chip 2
	PIT       []byte // struct kvm_pit_state2
	Clock     uint64 // kvm_clock_data.clock, ns
}

// VCPUState is one vCPU's KVM state, saved in Firecracker's order
// (src/vmm/src/vstate/vcpu.rs, save_state) and restored in its restore
// order: CPUID, MP state, regs, sregs, xsave, xcrs, debug regs, LAPIC, MSRs
// (after the LAPIC, for TSC_DEADLINE), events last.
type VCPUState struct {
	ID        int
	CPUID     []kvm.CPUIDEntry
	MPState   uint32
	Regs      kvm.Regs
	Sregs     kvm.Sregs
	XSave     []byte // struct kvm_xsave
	XCRs      kvm.XCRs
	DebugRegs []byte // struct kvm_debugregs
	LAPIC     []byte // struct kvm_lapic_state
	MSRs      []kvm.MSR
	Events    []byte // struct kvm_vcpu_events
}

// structBytes is the bytes of v, a kernel struct without pointers (not
// a copy).
func structBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// rawOf is a copy of v's bytes.
func rawOf[T any](v *T) []byte { return append([]byte(nil), structBytes(v)...) }

// fromRaw is the T whose bytes b holds, checking b's size; name is for
// the error.
func fromRaw[T any](b []byte, name string) (T, error) {
	var v T
	if uintptr(len(b)) != unsafe.Sizeof(v) {
		return v, fmt.Errorf("%s of %d bytes, want %d", name, len(b), unsafe.Sizeof(v))
	}
	copy(structBytes(&v), b)
	return v, nil
}

// save runs on the vCPU's own thread while it is parked.
func (c *vcpu) save() (*VCPUState, error) {
	k := c.k
	st := &VCPUState{ID: c.id}
	var err error
	if st.CPUID, err = k.GetCPUID2(); err != nil {
		return nil, err
	}
	mp, err := k.GetMPState()
	if err != nil {
		return nil, err
	}
	st.MPState = mp.State
	if st.Regs, err = k.GetRegs(); err != nil {
		return nil, err
	}
	if st.Sregs, err = k.GetSregs(); err != nil {
		return nil, err
	}
	x, err := k.GetXSave()
	if err != nil {
		return nil, err
	}
	st.XSave = rawOf(&x)
	if st.XCRs, err = k.GetXCRs(); err != nil {
		return nil, err
	}
	d, err := k.GetDebugRegs()
	if err != nil {
		return nil, err
	}
	st.DebugRegs = rawOf(&d)
	l, err := k.GetLAPIC()
	if err != nil {
		return nil, err
	}
	st.LAPIC = rawOf(&l)
	if st.MSRs, err = k.ReadableMSRs(c.m.msrIndex); err != nil {
		return nil, err
	}
	ev, err := k.GetVCPUEvents()
	if err != nil {
		return nil, err
	}
	st.Events = rawOf(&ev)
	c.learnPerCPU(st)
	return st, nil
}

func (c *vcpu) restore(st *VCPUState) error {
	k := c.k
	c.cpuid = st.CPUID
	c.learnPerCPU(st)
	if err := k.SetCPUID2(st.CPUID); err != nil {
		return err
	}
	if err := k.SetMPState(kvm.MPState{State: st.MPState}); err != nil {
		return err
	}
	if err := k.SetRegs(st.Regs); err != nil {
		return err
	}
	if err := k.SetSregs(st.Sregs); err != nil {
		return err
	}
	x, err := fromRaw[kvm.XSave](st.XSave, "xsave")
	if err != nil {
		return err
	}
	if err := k.SetXSave(x); err != nil {
		return err
	}
	if err := k.SetXCRs(st.XCRs); err != nil {
		return err
	}
	d, err := fromRaw[kvm.DebugRegs](st.DebugRegs, "debugregs")
	if err != nil {
		return err
	}
	if err := k.SetDebugRegs(d); err != nil {
		return err
	}
	l, err := fromRaw[kvm.LAPIC](st.LAPIC, "lapic")
	if err != nil {
		return err
	}
	if err := k.SetLAPIC(l); err != nil {
		return err
	}
	// All MSRs in one call; if this host refuses one, set them one by one
	// and skip the refused ones.
	if err := k.SetMSRs(st.MSRs); err != nil {
		for i := range st.MSRs {
			if err := k.SetMSRs(st.MSRs[i : i+1]); err != nil {
				c.m.log.Warn("restore: MSR refused", "vcpu", c.id, "msr", fmt.Sprintf("%#x", st.MSRs[i].Index), "err", err)
			}
		}
	}
	ev, err := fromRaw[kvm.VCPUEvents](st.Events, "vcpu events")
	if err != nil {
		return err
	}
	return k.SetVCPUEvents(ev)
}

// Save returns the state of a paused machine; guest RAM is saved
// with it by Snapshot.
func (m *Machine) Save() (*State, error) {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return nil, fmt.Errorf("save: %w", ErrEnded)
	}
	if !m.paused {
		return nil, fmt.Errorf("save: %w", ErrNotPaused)
	}
	return m.saveLocked()
}

// saveLocked is Save with ctl held on a paused machine.
func (m *Machine) saveLocked() (*State, error) {
	st := &State{Version: StateVersion, MemBytes: m.cfg.MemBytes, CPUs: len(m.vcpus), Cmdline: m.cmd.String()}
	for i, dst := range []*[]byte{&st.VM.PICMaster, &st.VM.PICSlave, &st.VM.IOAPIC} {
		c, err := m.vm.GetIRQChip(uint32(i))
		if err != nil {
			return nil, err
		}
		*dst = rawOf(&c)
	}
	pit, err := m.vm.GetPIT2()
	if err != nil {
		return nil, err
	}
	st.VM.PIT = rawOf(&pit)
	clk, err := m.vm.GetClock()
	if err != nil {
		return nil, err
	}
	st.VM.Clock = clk.Clock
	for _, c := range m.vcpus {
		r, err := c.request(evSave)
		if err != nil {
			return nil, fmt.Errorf("save: vcpu %d: %w", c.id, err)
		}
		st.VCPUs = append(st.VCPUs, *r.state)
	}
	st.Serial = m.serial.Save()
	for _, h := range m.hooks {
		if h.Save == nil {
			continue
		}
		v, err := h.Save()
		if err != nil {
			return nil, fmt.Errorf("save %s: %w", h.name, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("save %s: %w", h.name, err)
		}
		if st.Devices == nil {
			st.Devices = map[string]json.RawMessage{}
		}
		st.Devices[h.name] = b
	}
	return st, nil
}

// Restore loads st into a machine created with the snapshot's memory file
// (MachineConfig.MemFile) and the same devices added in the same order, and
// starts its vCPUs paused: call Resume. Dirty-page tracking restarts here
// (the new mappings read as all dirty until re-armed), so the machine's
// next delta over its snapshot holds only what the guest changes.
func (m *Machine) Restore(st *State) error {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.started {
		return fmt.Errorf("restore: already started")
	}
	if m.closed {
		return fmt.Errorf("restore: %w", ErrEnded)
	}
	if st.Version < 1 || st.Version > StateVersion {
		return fmt.Errorf("restore: state version %d, want 1 to %d", st.Version, StateVersion)
	}
	if len(st.VCPUs) != st.CPUs {
		return fmt.Errorf("restore: state names %d vCPUs but holds %d", st.CPUs, len(st.VCPUs))
	}
	if st.MemBytes != m.cfg.MemBytes || st.CPUs != len(m.vcpus) {
		return fmt.Errorf("restore: state is for %d bytes and %d vCPUs, machine has %d and %d",
			st.MemBytes, st.CPUs, m.cfg.MemBytes, len(m.vcpus))
	}
	if st.Cmdline != m.cmd.String() {
		return fmt.Errorf("restore: devices differ: snapshot cmdline %q, machine %q", st.Cmdline, m.cmd.String())
	}
	pit, err := fromRaw[kvm.PITState2](st.VM.PIT, "pit")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := m.vm.SetPIT2(pit); err != nil {
		return err
	}
	if err := m.vm.SetClock(kvm.ClockData{Clock: st.VM.Clock}); err != nil {
		return err
	}
	for i, b := range [][]byte{st.VM.PICMaster, st.VM.PICSlave, st.VM.IOAPIC} {
		c, err := fromRaw[kvm.IRQChip](b, "irqchip")
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		c.ChipID = uint32(i)
		if err := m.vm.SetIRQChip(c); err != nil {
			return err
		}
	}
	for i, c := range m.vcpus {
		if st.VCPUs[i].ID != c.id {
			return fmt.Errorf("restore: vcpu %d state has id %d", i, st.VCPUs[i].ID)
		}
		if err := c.restore(&st.VCPUs[i]); err != nil {
			return fmt.Errorf("restore: vcpu %d: %w", c.id, err)
		}
	}
	m.serial.Restore(st.Serial)
	for _, h := range m.hooks {
		if h.Restore == nil {
			continue
		}
		if err := h.Restore(st.Devices[h.name]); err != nil {
			return fmt.Errorf("restore %s: %w", h.name, err)
		}
	}
	if err := m.loadMSRIndex(); err != nil {
		return err
	}
	if err := m.ram.arm(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	m.started, m.paused = true, true
	for _, c := range m.vcpus {
		go c.loop(true)
	}
	m.registerDebug()
	go m.reap()
	return nil
}

func (m *Machine) loadMSRIndex() error {
	idx, err := m.sys.MSRIndexList()
	if err != nil {
		return err
	}
	m.msrIndex = idx
	return nil
}

// FromRaw decodes one of State's raw kernel structs (e.g. VMState.IOAPIC
// as kvm.IRQChip), checking its size; name is for the error. For
// programs that load a State without a Machine (tools/bench's floor).
func FromRaw[T any](b []byte, name string) (T, error) { return fromRaw[T](b, name) }
