package vmm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
)

// kickSignal interrupts a vCPU thread's KVM_RUN. A real-time signal the Go
// runtime does not use (it uses SIGURG for preemption, which also makes
// KVM_RUN return EINTR: harmless, the loop re-enters). Go installs a handler
// for it; Notify makes sure it is caught, never fatal.
const kickSignal = syscall.Signal(40) // SIGRTMIN+8 in glibc numbering

func init() {
	signal.Notify(make(chan os.Signal, 1), kickSignal)
}

type eventKind int

const (
	evPause eventKind = iota
	evResume
	evSave
	evStop
	evDebug // describe the interrupt state (irqdebug.go), then go on
)

// event is one request to a vCPU goroutine; the reply comes on reply.
type event struct {
	kind  eventKind
	reply chan reply
}

type reply struct {
	state *VCPUState
	text  string // evDebug's
	err   error
}

// vcpu is one virtual CPU and the goroutine (locked to its OS thread) that
// runs it.
type vcpu struct {
	m      *Machine
	k      *kvm.VCPU
	id     int
	tid    atomic.Int32
	events chan event
	exited chan struct{} // closed when the goroutine has returned
	cpuid  []kvm.CPUIDEntry
	exits  atomic.Uint64 // KVM_RUN returns with an exit to handle (logged at pause)
	percpu atomic.Uint64 // the guest kernel's per-CPU base, once known (percpu.go)
}

// setup gives a fresh vCPU its CPUID, MSRs, FPU and LAPIC; the boot CPU
// also gets the 64-bit entry state of the boot protocol.
func (c *vcpu) setup(supported []kvm.CPUIDEntry, cpus int, bp *boot.Params) error {
	c.cpuid = normalizeCPUID(supported, c.id, cpus)
	if err := c.k.SetCPUID2(c.cpuid); err != nil {
		return err
	}
	// KVM recomputes CPUID.0xD.0:EBX (XSAVE size for the current XCR0)
	// only when XCR0 bits beyond x87|SSE|AVX change (__kvm_set_xcr), so with
	// XCR0=1 at reset a guest enabling AVX reads 576 instead of 832 and
	// warns "XSAVE consistency problem". Start with XCR0 = every feature
	// offered and set CPUID again (allowed before the first KVM_RUN), so the
	// size matches what Linux enables.
	if d0 := findCPUID(c.cpuid, leafXSave, 0); d0 != nil && d0.EAX&0x7 == 0x7 {
		x := kvm.XCRs{NrXCRs: 1}
		x.XCRs[0].Value = uint64(d0.EDX)<<32 | uint64(d0.EAX)
		if err := c.k.SetXCRs(x); err != nil {
			c.m.log.Warn("set XCR0", "vcpu", c.id, "err", err)
		} else if err := c.k.SetCPUID2(c.cpuid); err != nil {
			return err
		}
	}
	for _, msr := range []kvm.MSR{
		{Index: kvm.MSRIA32SysenterCS}, {Index: kvm.MSRIA32SysenterESP}, {Index: kvm.MSRIA32SysenterEIP},
		{Index: kvm.MSRSTAR}, {Index: kvm.MSRCSTAR}, {Index: kvm.MSRKernelGSBase},
		{Index: kvm.MSRSyscallMask}, {Index: kvm.MSRLSTAR}, {Index: kvm.MSRIA32TSC},
		{Index: kvm.MSRIA32MiscEnable, Data: kvm.MiscEnableFastString},
		{Index: kvm.MSRMTRRDefType, Data: 1<<11 | 6}, // MTRRs on, default write-back
	} {
		if err := c.k.SetMSRs([]kvm.MSR{msr}); err != nil {
			c.m.log.Warn("boot MSR refused", "vcpu", c.id, "msr", fmt.Sprintf("%#x", msr.Index), "err", err)
		}
	}
	if err := c.k.SetFPU(kvm.FPU{FCW: 0x37f, MXCSR: 0x1f80}); err != nil {
		return err
	}
	// LAPIC: LINT0 = ExtINT (the PIC), LINT1 = NMI, as the MP table says.
	l, err := c.k.GetLAPIC()
	if err != nil {
		return err
	}
	setLVT(&l, 0x350, 7) // ExtINT
	setLVT(&l, 0x360, 4) // NMI
	if err := c.k.SetLAPIC(l); err != nil {
		return err
	}
	if c.id != 0 || bp == nil {
		return nil // APs wait for INIT/SIPI from the boot CPU
	}
	if err := c.k.SetRegs(kvm.Regs{RFLAGS: 2, RIP: bp.Entry, RSI: bp.ZeroPage,
		RSP: boot.BootStackAddr, RBP: boot.BootStackAddr}); err != nil {
		return err
	}
	s, err := c.k.GetSregs()
	if err != nil {
		return err
	}
	code := kvm.Segment{Base: 0, Limit: 0xffffffff, Selector: boot.SelectorCode, Type: 11,
		Present: 1, S: 1, L: 1, G: 1}
	data := kvm.Segment{Base: 0, Limit: 0xffffffff, Selector: boot.SelectorData, Type: 3,
		Present: 1, S: 1, DB: 1, G: 1}
	s.CS = code
	s.DS, s.ES, s.FS, s.GS, s.SS = data, data, data, data, data
	s.TR = kvm.Segment{Base: 0, Limit: 0xffffffff, Selector: boot.SelectorTSS, Type: 11, Present: 1, G: 1}
	s.GDT = kvm.DTable{Base: boot.GDTAddr, Limit: uint16(len(boot.GDT)*8 - 1)}
	s.IDT = kvm.DTable{Base: boot.IDTAddr, Limit: 7}
	s.CR0 = boot.CR0PE | boot.CR0ET | boot.CR0PG
	s.CR3 = boot.PML4Addr
	s.CR4 = boot.CR4PAE
	s.EFER = boot.EFERLME | boot.EFERLMA
	return c.k.SetSregs(s)
}

func setLVT(l *kvm.LAPIC, reg int, mode uint32) {
	v := uint32(l.Regs[reg]) | uint32(l.Regs[reg+1])<<8 | uint32(l.Regs[reg+2])<<16 | uint32(l.Regs[reg+3])<<24
	v = v&^0x700 | mode<<8
	l.Regs[reg], l.Regs[reg+1], l.Regs[reg+2], l.Regs[reg+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// kick makes the vCPU leave KVM_RUN soon: immediate_exit covers the window
// before it enters, the signal the time inside. The event must already be
// queued.
func (c *vcpu) kick() {
	c.k.SetImmediateExit(true)
	if tid := c.tid.Load(); tid != 0 {
		_ = unix.Tgkill(os.Getpid(), int(tid), kickSignal) // ESRCH: thread gone, vCPU ended
	}
}

// request sends one event to the vCPU and waits for its reply.
func (c *vcpu) request(kind eventKind) (reply, error) {
	ev := event{kind: kind, reply: make(chan reply, 1)}
	select {
	case c.events <- ev:
	case <-c.exited:
		return reply{}, ErrEnded
	}
	c.kick()
	select {
	case r := <-ev.reply:
		return r, r.err
	case <-c.exited:
		return reply{}, ErrEnded
	}
}

// loop runs the vCPU until the machine stops. paused says whether it starts
// parked (a restore waits for Resume).
func (c *vcpu) loop(paused bool) {
	runtime.LockOSThread()
	// Never unlocked: the thread carried signal-interrupted KVM state and
	// exits with the goroutine.
	c.tid.Store(int32(unix.Gettid()))
	defer close(c.exited)
	if paused {
		if !c.parked() {
			return
		}
	}
	for {
		err := c.k.Run()
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				c.k.SetImmediateExit(false)
				if !c.drain() {
					return
				}
				continue
			}
			c.m.end(ExitError, fmt.Errorf("vcpu %d: %w", c.id, err))
			return
		}
		c.exits.Add(1)
		if !c.exit() {
			return
		}
	}
}

// drain handles queued events; false means stop the goroutine.
func (c *vcpu) drain() bool {
	for {
		select {
		case <-c.m.done:
			return false
		case ev := <-c.events:
			switch ev.kind {
			case evPause:
				_ = c.k.KVMClockCtrl() // EINVAL without kvmclock: fine
				c.logPaused()
				ev.reply <- reply{}
				if !c.parked() {
					return false
				}
			case evStop:
				ev.reply <- reply{}
				return false
			case evDebug:
				ev.reply <- reply{text: c.debugState()}
			default:
				ev.reply <- reply{err: fmt.Errorf("vcpu %d: not paused", c.id)}
			}
		default:
			return true
		}
	}
}

// parked waits, out of KVM_RUN, for Resume or Stop and serves Save
// meanwhile; false means stop.
func (c *vcpu) parked() bool {
	for {
		var ev event
		select {
		case <-c.m.done:
			return false
		case ev = <-c.events:
		}
		switch ev.kind {
		case evResume:
			c.k.SetImmediateExit(false)
			ev.reply <- reply{}
			return true
		case evStop:
			ev.reply <- reply{}
			return false
		case evSave:
			st, err := c.save()
			ev.reply <- reply{state: st, err: err}
		case evPause:
			ev.reply <- reply{} // already paused
		case evDebug:
			ev.reply <- reply{text: c.debugState()}
		}
	}
}

// exit dispatches one KVM exit; false means the machine ended.
func (c *vcpu) exit() bool {
	m := c.m
	switch r := c.k.ExitReason(); r {
	case kvm.ExitIO:
		io := c.k.IOExit()
		m.pio(io)
	case kvm.ExitMMIO:
		mm := c.k.MMIOExit()
		m.mmio(mm)
	case kvm.ExitHLT, kvm.ExitIntr, kvm.ExitIRQWindowOpen:
	case kvm.ExitShutdown:
		c.logTripleFault()
		m.end(ExitReset, nil) // triple fault: the guest reset itself
		return false
	case kvm.ExitSystemEvent:
		switch c.k.SystemEvent() {
		case kvm.SystemEventShutdown:
			m.end(ExitPoweroff, nil)
		case kvm.SystemEventReset:
			m.end(ExitReset, nil)
		default:
			m.end(ExitCrash, nil)
		}
		return false
	case kvm.ExitFailEntry, kvm.ExitInternalError:
		m.end(ExitError, fmt.Errorf("vcpu %d: KVM exit %d, data %#x", c.id, r, c.k.ExitData(4)))
		return false
	default:
		m.end(ExitError, fmt.Errorf("vcpu %d: unexpected KVM exit %d", c.id, r))
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// logPaused logs where the vCPU was when it paused and how many exits
// it has had: a guest that stalls says whether it was spinning, idle with
// interrupts on (waiting for one that never came), or not exiting at all.
func (c *vcpu) logPaused() {
	r, err := c.k.GetRegs()
	if err != nil {
		slog.Warn("vcpu: paused; registers unreadable", "vcpu", c.id, "exits", c.exits.Load(), "err", err)
		return
	}
	slog.Info("vcpu: paused", "vcpu", c.id, "rip", fmt.Sprintf("%#x", r.RIP),
		"rflags", fmt.Sprintf("%#x", r.RFLAGS), "exits", c.exits.Load())
}

// logTripleFault logs the vCPU's state at a triple fault
// (KVM_EXIT_SHUTDOWN): a guest that resets this way prints nothing. On
// Intel the registers say where it was (System.map resolves RIP: the
// guest kernel has no KASLR); on AMD KVM re-initialises the VMCB at the
// SHUTDOWN intercept, so they read as the reset state (rip 0xfff0, cs
// 0xf000, seen in the lab) and the line only tells a reset from a crash.
func (c *vcpu) logTripleFault() {
	r, err1 := c.k.GetRegs()
	s, err2 := c.k.GetSregs()
	hex := func(v uint64) string { return fmt.Sprintf("%#x", v) }
	slog.Warn("vcpu: triple fault, the guest resets", "vcpu", c.id, "rip", hex(r.RIP), "rsp", hex(r.RSP),
		"rflags", hex(r.RFLAGS), "cr0", hex(s.CR0), "cr2", hex(s.CR2), "cr3", hex(s.CR3), "cr4", hex(s.CR4),
		"efer", hex(s.EFER), "idt", hex(s.IDT.Base), "gdt", hex(s.GDT.Base), "cs", hex(uint64(s.CS.Selector)), "err", errors.Join(err1, err2))
}
