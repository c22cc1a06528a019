package vmm

import (
	"testing"

	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
)

func TestNormalizeCPUID(t *testing.T) {
	sig := uint32(kvm.CPUIDFlagSignificantIndex)
	supported := []kvm.CPUIDEntry{
		{Function: 1, ECX: ecxXSAVE | ecxVMX, EBX: 0xff00_1234},
		{Function: 7, Flags: sig, Index: 0, EBX: ebx7AVX512F},
		{Function: 0xb, Flags: sig, Index: 0, EDX: 9},
		{Function: 0xb, Flags: sig, Index: 1, EDX: 9},
		// XCR0 offers x87|SSE|AVX|AVX-512 (0xe7) but the guest has no AVX bit.
		{Function: 0xd, Flags: sig, Index: 0, EAX: 0xe7, EBX: 2696, ECX: 2696},
		{Function: 0xd, Flags: sig, Index: 1, EAX: 0xf, ECX: 0x1800},
		{Function: 0xd, Flags: sig, Index: 2, EAX: 256, EBX: 576},
		{Function: 0xd, Flags: sig, Index: 5, EAX: 64, EBX: 1088},
		{Function: 0xd, Flags: sig, Index: 6, EAX: 512, EBX: 1152},
		{Function: 0xd, Flags: sig, Index: 7, EAX: 1024, EBX: 1664},
		{Function: 0x80000001, ECX: ecxSVM | 1},
		// kvmclock, PV EOI, async PF (3 bits), PV unhalt.
		{Function: leafKVMFeat, EAX: 1<<3 | 1<<6 | kvmFeatAsyncPF | kvmFeatAsyncPFVMExit | kvmFeatAsyncPFInt | 1<<7},
	}
	got := normalizeCPUID(supported, 1, 2)
	if e := findCPUID(got, leafKVMFeat, 0); e.EAX != 1<<3|1<<6|1<<7 {
		t.Errorf("leaf 0x40000001 EAX = %#x; want the async page fault bits (4, 10, 14) clear, the rest kept", e.EAX)
	}
	f1 := findCPUID(got, 1, 0)
	if f1.ECX&ecxHypervisor == 0 || f1.ECX&ecxVMX != 0 {
		t.Errorf("leaf 1 ECX = %#x: want hypervisor set, VMX clear", f1.ECX)
	}
	if f1.EBX>>24 != 1 || f1.EBX>>16&0xff != 2 || f1.EBX&0xffff != 0x1234 {
		t.Errorf("leaf 1 EBX = %#x: want APIC id 1, 2 logical CPUs", f1.EBX)
	}
	if e := findCPUID(got, 0xb, 1); e.EDX != 1 {
		t.Errorf("leaf 0xb.1 EDX = %d; want x2APIC id 1", e.EDX)
	}
	if e := findCPUID(got, 0x80000001, 0); e.ECX != 1 {
		t.Errorf("leaf 0x80000001 ECX = %#x; want SVM clear", e.ECX)
	}
	s := findCPUID(got, leafKVMSig, 0)
	if s == nil || s.EBX != 0x4b4d564b || s.EAX < leafKVMFeat {
		t.Errorf("KVM signature leaf = %+v", s)
	}
	// AVX (bit 2) dropped for lack of CPUID.1:ECX.AVX; AVX-512 kept.
	d0 := findCPUID(got, 0xd, 0)
	if d0.EAX != 0xe3 {
		t.Errorf("leaf 0xd.0 EAX = %#x; want 0xe3", d0.EAX)
	}
	if d0.EBX != 2688 || d0.ECX != 2688 {
		t.Errorf("leaf 0xd.0 sizes = %d/%d; want 2688 (end of state 7)", d0.EBX, d0.ECX)
	}
	if e := findCPUID(got, 0xd, 2); e.EAX != 0 {
		t.Errorf("leaf 0xd.2 = %+v; want zeroed", e)
	}
	if e := findCPUID(got, 0xd, 1); e.ECX != 0 {
		t.Errorf("leaf 0xd.1 ECX = %#x; want no supervisor states", e.ECX)
	}
	if supported[0].ECX&ecxHypervisor != 0 {
		t.Errorf("normalizeCPUID modified its input")
	}
}

func TestGuestRAM(t *testing.T) {
	r, err := mapRAM(64<<20, "", procFiles{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	b, err := r.Slice(0x1000, 16)
	if err != nil || len(b) != 16 || cap(b) != 16 {
		t.Fatalf("Slice = %d/%d, %v", len(b), cap(b), err)
	}
	b[0] = 7
	if r.mem[0x1000] != 7 {
		t.Errorf("Slice does not alias RAM")
	}
	for _, c := range []struct {
		gpa uint64
		n   int
	}{{64 << 20, 1}, {64<<20 - 1, 2}, {boot.MMIOHoleStart, 4}, {0, -1}} {
		if _, err := r.Slice(c.gpa, c.n); err == nil {
			t.Errorf("Slice(%#x, %d) = nil error", c.gpa, c.n)
		}
	}
	if _, err := mapRAM(3<<20, "", procFiles{}, ""); err == nil {
		t.Errorf("mapRAM(3 MiB) = nil error")
	}
}

func TestAddTSCDeadline(t *testing.T) {
	in := []kvm.CPUIDEntry{{Function: 0}, {Function: 1, ECX: ecxXSAVE}}
	out := addTSCDeadline(in)
	if f1 := findCPUID(out, 1, 0); f1.ECX != ecxXSAVE|ecxTSCDeadline {
		t.Errorf("leaf 1 ECX = %#x, want %#x", f1.ECX, ecxXSAVE|ecxTSCDeadline)
	}
	if in[1].ECX != ecxXSAVE {
		t.Errorf("addTSCDeadline modified its input")
	}
}
