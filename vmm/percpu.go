package vmm

import (
	"fmt"

	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
)

// A guest kernel's per-CPU base, for the SIGUSR1 dump. An x86-64 Linux
// kernel keeps each CPU's per-CPU area at one address for its whole
// life: in GS's base while the CPU runs kernel code, in
// MSR_KERNEL_GS_BASE while it runs user code (SWAPGS trades them on
// every kernel entry and exit). The lab's nested emulation has been
// seen to leave a guest's GS base in the wrong place across
// VMRUN/#VMEXIT (docs/lab.md, "QEMU"); a guest kernel on a wrong base
// reads its per-CPU data at a wrong address and faults or spins there
// (a lock that is not a lock) with nothing on its console. A vCPU
// learns its kernel's base from the state it is restored from or saved
// to, and the dump compares the base the kernel is running on with it.

// slippedPerCPU is what the dump says of a vCPU whose kernel runs on
// another base than its own (tools/lab/faults.sh's labpercpu matches it).
const slippedPerCPU = "per-CPU base slipped"

// kernelHalf is the lowest address of the upper, kernel half of a
// 48-bit address space.
const kernelHalf = 0xffff800000000000

// kernelGSBase is the per-CPU base of the kernel in state s: GS's base
// while the vCPU runs kernel code (CPL 0), else kernelGS, the saved
// MSR_KERNEL_GS_BASE. Zero when that is no kernel address (a kernel
// that has not set it up yet, or a state this does not describe).
func kernelGSBase(s *kvm.Sregs, kernelGS uint64) uint64 {
	b := runningBase(s, kernelGS)
	if b < kernelHalf {
		return 0
	}
	return b
}

// runningBase is the per-CPU base the kernel in state s runs on: GS's
// base at CPL 0, else kernelGS (MSR_KERNEL_GS_BASE, where SWAPGS keeps
// it while user code runs).
func runningBase(s *kvm.Sregs, kernelGS uint64) uint64 {
	if s.CS.Selector&3 == 0 {
		return s.GS.Base
	}
	return kernelGS
}

// msrValue is the value of MSR index in ms, or 0.
func msrValue(ms []kvm.MSR, index uint32) uint64 {
	for _, m := range ms {
		if m.Index == index {
			return m.Data
		}
	}
	return 0
}

// learnPerCPU records the kernel's per-CPU base of state st, when it has one.
func (c *vcpu) learnPerCPU(st *VCPUState) {
	if b := kernelGSBase(&st.Sregs, msrValue(st.MSRs, kvm.MSRKernelGSBase)); b != 0 {
		c.percpu.Store(b)
	}
}

// describeGS is the dump's line on the GS bases of a vCPU in state s
// whose MSR_KERNEL_GS_BASE is kernelGS and whose kernel's per-CPU base
// is percpu (0: not known, a machine neither restored nor saved). A
// vCPU caught in the few instructions of a kernel entry before its
// SWAPGS reads as slipped: interruptState reads such a one again.
func describeGS(s *kvm.Sregs, kernelGS, percpu uint64) string {
	line := fmt.Sprintf("    gs: cpl=%d base=%#x kernel_gs_base=%#x cr2=%#x cr3=%#x", s.CS.Selector&3, s.GS.Base, kernelGS, s.CR2, s.CR3)
	running := runningBase(s, kernelGS)
	switch {
	case percpu == 0:
		return line + " per-cpu=unknown\n"
	case running == percpu:
		return fmt.Sprintf("%s per-cpu=%#x ok\n", line, percpu)
	default:
		return fmt.Sprintf("%s %s: the kernel's base %#x, its per-CPU area %#x\n", line, slippedPerCPU, running, percpu)
	}
}

// foreignState is what the dump says of a vCPU whose paging root lies
// outside its guest's RAM (tools/lab/faults.sh's labpercpu matches it).
// A guest kernel cannot run on such a root: every fetch would miss
// memory. Seen in the lab's SVM stall, whose vCPU holds the lab kernel's
// RIP, RSP and CR3 (docs/lab.md, "The dump of a stall").
const foreignState = "CR3 outside guest RAM: not the guest state"

// describeRoot is the dump's line on a vCPU whose paging is on and
// whose CR3 is not within one of regions; "" otherwise.
func describeRoot(s *kvm.Sregs, regions []boot.RAMRegion) string {
	const pg = 1 << 31 // CR0.PG
	if s.CR0&pg == 0 {
		return ""
	}
	root := s.CR3 &^ 0xfff // the low bits: PCID or PWT/PCD
	for _, r := range regions {
		if root >= r.GPA && root-r.GPA < r.Size {
			return ""
		}
	}
	return fmt.Sprintf("    root: cpl=%d cr3=%#x %s\n", s.CS.Selector&3, s.CR3, foreignState)
}
