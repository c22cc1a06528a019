package vmm

import (
	"strings"
	"testing"

	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
)

func TestPerCPUBase(t *testing.T) {
	const base, user = 0xffff88800fa00000, 0x7f0012340000
	kernel := kvm.Sregs{CS: kvm.Segment{Selector: 0x10}, GS: kvm.Segment{Base: base}}
	userMode := kvm.Sregs{CS: kvm.Segment{Selector: 0x33}, GS: kvm.Segment{Base: user}}
	for _, c := range []struct {
		name     string
		s        kvm.Sregs
		kernelGS uint64
		want     uint64
	}{
		{"kernel mode: GS", kernel, user, base},
		{"user mode: MSR_KERNEL_GS_BASE", userMode, base, base},
		{"user mode before the kernel set it", userMode, 0, 0},
		{"firmware-like state: GS 0 at CPL 0", kvm.Sregs{}, base, 0},
	} {
		if got := kernelGSBase(&c.s, c.kernelGS); got != c.want {
			t.Errorf("%s: kernelGSBase = %#x, want %#x", c.name, got, c.want)
		}
	}

	var cv vcpu
	cv.learnPerCPU(&VCPUState{Sregs: userMode, MSRs: []kvm.MSR{{Index: kvm.MSRSTAR, Data: 1}, {Index: kvm.MSRKernelGSBase, Data: base}}})
	if got := cv.percpu.Load(); got != base {
		t.Fatalf("learnPerCPU from a user-mode state: %#x, want %#x", got, uint64(base))
	}
	cv.learnPerCPU(&VCPUState{Sregs: userMode}) // no base in it: kept
	if got := cv.percpu.Load(); got != base {
		t.Fatalf("learnPerCPU from a state without a base dropped the known one: %#x", got)
	}

	for _, c := range []struct {
		name     string
		s        kvm.Sregs
		kernelGS uint64
		percpu   uint64
		want     string
		slipped  bool
	}{
		{"kernel on its base", kernel, user, base, "per-cpu=0xffff88800fa00000 ok", false},
		{"user with the base in the MSR", userMode, base, base, " ok", false},
		{"not known", kernel, user, 0, "per-cpu=unknown", false},
		{"kernel on the user's base", kvm.Sregs{CS: kernel.CS, GS: kvm.Segment{Base: user}}, base, base, "the kernel's base 0x7f0012340000", true},
		{"kernel on another guest's base", kvm.Sregs{CS: kernel.CS, GS: kvm.Segment{Base: base + 0x40000}}, user, base, "its per-CPU area 0xffff88800fa00000", true},
		{"user with GS swapped twice", userMode, user, base, "the kernel's base 0x7f0012340000", true},
	} {
		got := describeGS(&c.s, c.kernelGS, c.percpu)
		if !strings.Contains(got, c.want) || strings.Contains(got, slippedPerCPU) != c.slipped || !strings.HasPrefix(got, "    gs: cpl=") {
			t.Errorf("%s: describeGS = %q; want %q in it, slipped %v", c.name, got, c.want, c.slipped)
		}
	}
}

// TestPagingRoot: the dump calls a vCPU's state foreign when paging is on
// and CR3 (its low bits aside) lies in no RAM region, below or above the
// MMIO hole; with paging off CR3 means nothing.
func TestPagingRoot(t *testing.T) {
	const pg = 1 << 31
	small := boot.RAMLayout(256 << 20)
	large := boot.RAMLayout(6 << 30)
	for _, c := range []struct {
		name    string
		cr0     uint64
		cr3     uint64
		regions []boot.RAMRegion
		foreign bool
	}{
		{"in RAM", pg, 0x2053000, small, false},
		{"in RAM with a PCID", pg, 0x2053000 | 0x801, small, false},
		{"the last page", pg, 256<<20 - 4096, small, false},
		{"just past RAM", pg, 256 << 20, small, true},
		{"the lab kernel's (seen in a stall)", pg, 0x18841b000, small, true},
		{"above the hole", pg, boot.HighRAMStart + 0x1000, large, false},
		{"in the hole", pg, boot.MMIOHoleStart + 0x1000, large, true},
		{"paging off", 0, 0x18841b000, small, false},
	} {
		got := describeRoot(&kvm.Sregs{CR0: c.cr0, CR3: c.cr3}, c.regions)
		if (got != "") != c.foreign || c.foreign && (!strings.Contains(got, foreignState) || !strings.HasPrefix(got, "    root: cpl=")) {
			t.Errorf("%s: describeRoot = %q; want foreign %v", c.name, got, c.foreign)
		}
	}
}
