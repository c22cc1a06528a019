package vmm

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"sandfs/vmm/kvm"
	"sandfs/vmm/virtio"
)

// The interrupt controllers' state in the SIGUSR1 dump (virtio.DebugEnv).
// A guest that stops taking device interrupts leaves used entries and an
// unacknowledged InterruptStatus in the virtio part of the dump; this part
// says where the interrupts stop: an IOAPIC pin masked or waiting for an
// EOI (remote IRR), or a vector pending in a LAPIC's IRR behind one left
// in its ISR, with the paravirtual EOI and async page fault MSRs beside.

// MSRs shown in the dump (KVM's paravirtual ones from
// Documentation/virt/kvm/x86/msr.rst).
var debugMSRs = []struct {
	name  string
	index uint32
}{
	{"tsc", kvm.MSRIA32TSC},
	{"tsc_deadline", kvm.MSRIA32TSCDeadline},
	{"pv_eoi", 0x4b564d04},       // MSR_KVM_PV_EOI_EN
	{"async_pf", 0x4b564d02},     // MSR_KVM_ASYNC_PF_EN
	{"async_pf_int", 0x4b564d06}, // MSR_KVM_ASYNC_PF_INT
}

// LAPIC register offsets (Intel SDM vol. 3A, table 11-1).
const (
	lapicTPR   = 0x80
	lapicPPR   = 0xa0
	lapicSPIV  = 0xf0
	lapicISR   = 0x100
	lapicTMR   = 0x180
	lapicIRR   = 0x200
	lapicLVTT  = 0x320
	lapicTMICT = 0x380
	lapicTMCCT = 0x390
)

// registerDebug adds the machine to the dump while it runs; reap takes
// it out.
func (m *Machine) registerDebug() {
	if virtio.DebugOn() {
		m.undebug = virtio.AddDebugSection(m.interruptState)
	}
}

// StallReport describes where a machine stands, for a caller that has
// given up waiting on its guest (a lab test): the PICs, the IOAPIC and
// each vCPU's RIP, LAPIC and events, in the SIGUSR1 dump's form, whose
// "vcpu N: rip=0x…" lines tools/lab/faults.sh's labsvmrips reads to tell
// the lab's nested-SVM stall from the guest's own.
func (m *Machine) StallReport() string { return m.interruptState() }

// interruptState describes the PICs, the IOAPIC and each vCPU's LAPIC.
// Each vCPU reads its own state on its thread (KVM_RUN holds the vCPU);
// one that does not answer within a second is reported as such.
func (m *Machine) interruptState() string {
	var b strings.Builder
	b.WriteString("interrupts:\n")
	for id, name := range []string{"pic master", "pic slave", "ioapic"} {
		c, err := m.vm.GetIRQChip(uint32(id))
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", name, err)
			continue
		}
		if id < 2 {
			p := c.Chip[:]
			fmt.Fprintf(&b, "  %s: irr=%#02x imr=%#02x isr=%#02x base=%#02x elcr=%#02x\n", name, p[1], p[2], p[3], p[5], p[14])
			continue
		}
		b.WriteString(describeIOAPIC(c.Chip[:]))
	}
	for _, c := range m.vcpus {
		text := c.describe()
		// A vCPU caught between a kernel entry and its SWAPGS (or a
		// SWAPGS and the return to user mode) reads as slipped for
		// those few instructions: about 1 dump in 150 of a guest busy
		// with system calls, in the lab. A slip that lasts is read
		// again and again; a running vCPU moves on between samples
		// (a paused one does not: its one state is read each time).
		for n := 1; n < gsSamples && strings.Contains(text, slippedPerCPU); n++ {
			time.Sleep(gsResample)
			next := c.describe()
			if !strings.Contains(next, slippedPerCPU) {
				text = next + fmt.Sprintf("    gs: slipped in the %d sample(s) %v before this one: a kernel entry or exit caught at its SWAPGS\n", n, gsResample)
			} else {
				text = next
			}
		}
		b.WriteString(text)
	}
	return b.String()
}

// gsSamples is how many times the dump reads a vCPU that it finds off
// its kernel's per-CPU base, gsResample apart, before it says so.
const (
	gsSamples  = 3
	gsResample = 20 * time.Millisecond
)

// describe is the vCPU's part of the dump, read on its thread; a vCPU
// that does not answer within a second is reported as such.
func (c *vcpu) describe() string {
	done := make(chan reply, 1)
	go func() { r, _ := c.request(evDebug); done <- r }()
	select {
	case r := <-done:
		if r.err != nil {
			return fmt.Sprintf("  vcpu %d: %v\n", c.id, r.err)
		}
		return r.text
	case <-time.After(time.Second):
		return fmt.Sprintf("  vcpu %d: no answer within 1s\n", c.id)
	}
}

// describeIOAPIC lists the pins with a vector programmed (struct
// kvm_ioapic_state: irr at byte 16, 24 redirection entries from byte 24).
func describeIOAPIC(s []byte) string {
	var b strings.Builder
	irr := binary.LittleEndian.Uint32(s[16:])
	fmt.Fprintf(&b, "  ioapic: irr=%#x\n", irr)
	for pin := range 24 {
		e := binary.LittleEndian.Uint64(s[24+8*pin:])
		if e&0xff == 0 {
			continue
		}
		trig := "edge"
		if e>>15&1 == 1 {
			trig = "level"
		}
		fmt.Fprintf(&b, "    pin %d: vector=%#02x %s masked=%d remote_irr=%d dest=%d\n",
			pin, e&0xff, trig, e>>16&1, e>>14&1, e>>56)
	}
	return b.String()
}

// debugState runs on the vCPU's thread, out of KVM_RUN.
func (c *vcpu) debugState() string {
	var b strings.Builder
	r, err := c.k.GetRegs()
	if err != nil {
		return fmt.Sprintf("  vcpu %d: registers: %v\n", c.id, err)
	}
	mp, _ := c.k.GetMPState()
	fmt.Fprintf(&b, "  vcpu %d: rip=%#x rflags=%#x if=%d mp_state=%d exits=%d\n",
		c.id, r.RIP, r.RFLAGS, r.RFLAGS>>9&1, mp.State, c.exits.Load())
	fmt.Fprintf(&b, "    regs: rax=%#x rbx=%#x rcx=%#x rdx=%#x rsi=%#x rdi=%#x rbp=%#x rsp=%#x r8=%#x r9=%#x r10=%#x r11=%#x r12=%#x r13=%#x r14=%#x r15=%#x\n",
		r.RAX, r.RBX, r.RCX, r.RDX, r.RSI, r.RDI, r.RBP, r.RSP, r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15)
	if s, err := c.k.GetSregs(); err != nil {
		fmt.Fprintf(&b, "    gs: %v\n", err)
	} else {
		kgs := []kvm.MSR{{Index: kvm.MSRKernelGSBase}}
		if n, err := c.k.GetMSRs(kgs); err != nil || n != 1 {
			fmt.Fprintf(&b, "    gs: MSR_KERNEL_GS_BASE: %v\n", err)
		} else {
			b.WriteString(describeGS(&s, kgs[0].Data, c.percpu.Load()))
		}
		if c.m.ram != nil {
			b.WriteString(describeRoot(&s, c.m.ram.regions))
		}
	}
	if l, err := c.k.GetLAPIC(); err != nil {
		fmt.Fprintf(&b, "    lapic: %v\n", err)
	} else {
		b.WriteString(describeLAPIC(&l))
	}
	if ev, err := c.k.GetVCPUEvents(); err == nil {
		e := ev.Raw[:]
		fmt.Fprintf(&b, "    events: exception injected=%d nr=%d pending=%d; interrupt injected=%d nr=%#02x shadow=%d; nmi injected=%d pending=%d masked=%d\n",
			e[0], e[1], e[3], e[8], e[9], e[11], e[12], e[13], e[14])
	}
	ms := make([]kvm.MSR, len(debugMSRs))
	for i, d := range debugMSRs {
		ms[i].Index = d.index
	}
	n, _ := c.k.GetMSRs(ms)
	b.WriteString("    msrs:")
	for i, d := range debugMSRs {
		if i < n {
			fmt.Fprintf(&b, " %s=%#x", d.name, ms[i].Data)
		} else {
			fmt.Fprintf(&b, " %s=?", d.name)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// describeLAPIC shows the priority registers, the vectors in service,
// requested and level-triggered, and the timer.
func describeLAPIC(l *kvm.LAPIC) string {
	reg := func(off int) uint32 { return binary.LittleEndian.Uint32(l.Regs[off:]) }
	return fmt.Sprintf("    lapic: tpr=%#x ppr=%#x spiv=%#x isr=%s irr=%s tmr=%s lvtt=%#x tmict=%#x tmcct=%#x\n",
		reg(lapicTPR), reg(lapicPPR), reg(lapicSPIV), lapicVectors(l, lapicISR), lapicVectors(l, lapicIRR),
		lapicVectors(l, lapicTMR), reg(lapicLVTT), reg(lapicTMICT), reg(lapicTMCCT))
}

// lapicVectors lists the vectors set in the 256-bit register at base
// (eight 32-bit words, 16 bytes apart).
func lapicVectors(l *kvm.LAPIC, base int) string {
	var vs []string
	for w := range 8 {
		bits := binary.LittleEndian.Uint32(l.Regs[base+16*w:])
		for i := range 32 {
			if bits>>i&1 == 1 {
				vs = append(vs, fmt.Sprintf("%#02x", w*32+i))
			}
		}
	}
	return "[" + strings.Join(vs, " ") + "]"
}
