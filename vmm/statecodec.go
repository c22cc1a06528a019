package vmm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
	"sandfs/vmm/serial"
)

// A machine's State, as a snapshot's meta holds it (snapshot.Meta.State).
//
// Version 2, which EncodeState writes, is binary: the kernel's structs
// as their bytes, each a length and the bytes (lengths little-endian
// uint32), in this order:
//
//	"SANDVMST" uint32(version) uint64(MemBytes) uint32(CPUs) Cmdline
//	PICMaster PICSlave IOAPIC PIT uint64(Clock) uint32(len(VCPUs))
//	per vCPU: uint32(ID) CPUID uint32(MPState) Regs Sregs XSave XCRs
//	          DebugRegs LAPIC MSRs Events
//	JSON of {Serial, Devices}
//
// Version 1 was the JSON of State: a vCPU's CPUID table (256 entries
// under the lab's -cpu max) and MSRs, object by object, made decoding it
// 0.4 ms on a host (the bench floor's state step, which decodes it too,
// 10 ms in the lab against 2 now) and encoding it most of a snapshot's
// encode-state. DecodeState reads both.

const stateMagic = "SANDVMST"

// stateRest is what version 2 keeps as JSON: small, and shaped by the
// devices.
type stateRest struct {
	Serial  serial.State
	Devices map[string]json.RawMessage `json:",omitempty"`
}

// EncodeState returns st in StateVersion's encoding.
func EncodeState(st *State) ([]byte, error) {
	rest, err := json.Marshal(stateRest{st.Serial, st.Devices})
	if err != nil {
		return nil, err
	}
	e := stateEnc{b: make([]byte, 0, 32<<10)}
	e.b = append(e.b, stateMagic...)
	e.u32(StateVersion)
	e.u64(st.MemBytes)
	e.u32(uint32(st.CPUs))
	e.bytes([]byte(st.Cmdline))
	for _, b := range [][]byte{st.VM.PICMaster, st.VM.PICSlave, st.VM.IOAPIC, st.VM.PIT} {
		e.bytes(b)
	}
	e.u64(st.VM.Clock)
	e.u32(uint32(len(st.VCPUs)))
	for i := range st.VCPUs {
		c := &st.VCPUs[i]
		e.u32(uint32(c.ID))
		e.bytes(sliceBytes(c.CPUID))
		e.u32(c.MPState)
		e.bytes(structBytes(&c.Regs))
		e.bytes(structBytes(&c.Sregs))
		e.bytes(c.XSave)
		e.bytes(structBytes(&c.XCRs))
		e.bytes(c.DebugRegs)
		e.bytes(c.LAPIC)
		e.bytes(sliceBytes(c.MSRs))
		e.bytes(c.Events)
	}
	e.bytes(rest)
	return e.b, nil
}

// DecodeState parses a State that EncodeState wrote, in this version or
// (JSON) version 1. It checks the encoding, not what the values mean:
// Restore checks them against the machine. The State's byte fields
// share b's bytes (a snapshot's meta is its caller's own copy).
func DecodeState(b []byte) (*State, error) {
	if len(b) > 0 && b[0] == '{' {
		var st State
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		if st.Version != 1 {
			return nil, fmt.Errorf("state: JSON of version %d, want 1", st.Version)
		}
		return &st, nil
	}
	d := stateDec{b: b}
	if string(d.next(len(stateMagic))) != stateMagic {
		return nil, errors.New("state: bad magic")
	}
	st := &State{Version: int(d.u32())}
	if d.err == nil && st.Version != StateVersion {
		return nil, fmt.Errorf("state: version %d, want 1 or %d", st.Version, StateVersion)
	}
	st.MemBytes = d.u64()
	st.CPUs = int(d.u32())
	st.Cmdline = string(d.bytes())
	for _, p := range []*[]byte{&st.VM.PICMaster, &st.VM.PICSlave, &st.VM.IOAPIC, &st.VM.PIT} {
		*p = d.bytes()
	}
	st.VM.Clock = d.u64()
	n := d.u32()
	if d.err == nil && (n < 1 || n > boot.MaxCPUs) {
		return nil, fmt.Errorf("state: %d vCPUs", n)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		var c VCPUState
		c.ID = int(d.u32())
		c.CPUID = bytesSlice[kvm.CPUIDEntry](&d, "cpuid")
		c.MPState = d.u32()
		c.Regs = bytesStruct[kvm.Regs](&d, "regs")
		c.Sregs = bytesStruct[kvm.Sregs](&d, "sregs")
		c.XSave = d.bytes()
		c.XCRs = bytesStruct[kvm.XCRs](&d, "xcrs")
		c.DebugRegs = d.bytes()
		c.LAPIC = d.bytes()
		c.MSRs = bytesSlice[kvm.MSR](&d, "msrs")
		c.Events = d.bytes()
		st.VCPUs = append(st.VCPUs, c)
	}
	rest := d.bytes()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after the end", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("state: %w", d.err)
	}
	var r stateRest
	if err := json.Unmarshal(rest, &r); err != nil {
		return nil, fmt.Errorf("state: serial and devices: %w", err)
	}
	st.Serial, st.Devices = r.Serial, r.Devices
	return st, nil
}

// stateEnc appends version 2's fields.
type stateEnc struct{ b []byte }

func (e *stateEnc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *stateEnc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *stateEnc) bytes(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
}

// stateDec reads version 2's fields; after the first error every read
// returns zero and err stays that error.
type stateDec struct {
	b   []byte
	err error
}

func (d *stateDec) next(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = errors.New("truncated")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *stateDec) u32() uint32 {
	if p := d.next(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *stateDec) u64() uint64 {
	if p := d.next(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// bytes reads a length and that many bytes (nil for none), sharing
// them with the input.
func (d *stateDec) bytes() []byte {
	n := d.u32()
	if d.err != nil || n == 0 {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("a field of %d bytes, %d left", n, len(d.b))
		return nil
	}
	return d.next(int(n))
}

// sliceBytes is the bytes of s's entries, kernel structs without
// pointers.
func sliceBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// bytesStruct reads a field holding one T (fromRaw).
func bytesStruct[T any](d *stateDec, name string) T {
	p := d.bytes()
	if d.err != nil {
		var zero T
		return zero
	}
	v, err := fromRaw[T](p, name)
	d.err = err
	return v
}

// bytesSlice reads a field holding whole Ts.
func bytesSlice[T any](d *stateDec, name string) []T {
	p := d.bytes()
	if d.err != nil || len(p) == 0 {
		return nil
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(p)%size != 0 {
		d.err = fmt.Errorf("%s: %d bytes are not whole entries of %d", name, len(p), size)
		return nil
	}
	s := make([]T, len(p)/size)
	copy(sliceBytes(s), p)
	return s
}
