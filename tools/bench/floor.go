package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/snapshot"
	"sandfs/vmm"
	"sandfs/vmm/boot"
	"sandfs/vmm/kvm"
)

// The floor of a restore: a process that does only what no restore can
// avoid (open KVM, create the VM with its in-kernel irqchip and PIT, map
// the snapshot's memory file MAP_PRIVATE as guest RAM, create the vCPUs,
// load the saved VM and vCPU state) and enters KVM_RUN. No devices, no
// console, no control socket, no jail. `sandfs bench floor DIR` is that
// process; the benchmark times it from its start to its "running" line,
// as it times a sandfs VMM from its start to Launch returning.

// floorMain is `sandfs bench floor DIR` (DIR a full snapshot): it prints
// "running <phases>" just before the vCPUs' first KVM_RUN, then runs
// them until killed.
func floorMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sandfs bench floor SNAPSHOT-DIR")
		return codeUsage
	}
	vcpus, phases, err := floorRestore(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench floor:", err)
		return codeError
	}
	fmt.Printf("running %s\n", phases)
	for _, c := range vcpus[1:] {
		go func(c *kvm.VCPU) { runtime.LockOSThread(); runVCPU(c) }(c)
	}
	runtime.LockOSThread()
	runVCPU(vcpus[0])
	return 0
}

// runVCPU enters KVM_RUN again after every exit, 1 ms later (nothing is
// emulated: the guest only has to be running).
func runVCPU(c *kvm.VCPU) {
	for {
		c.Run()
		time.Sleep(time.Millisecond)
	}
}

// floorRestore builds the restored VM of the full snapshot dir and
// returns its vCPUs, ready to run, and the time each step took.
func floorRestore(dir string) ([]*kvm.VCPU, string, error) {
	var ph []string
	t := now()
	step := func(name string) {
		ph = append(ph, fmt.Sprintf("%s=%.2fms", name, float64(since(t).Microseconds())/1000))
		t = now()
	}
	sn, err := snapshot.Open(dir)
	if err != nil {
		return nil, "", err
	}
	if !sn.Full() {
		return nil, "", fmt.Errorf("%s: not a full snapshot", dir)
	}
	st, err := vmm.DecodeState(sn.State)
	if err != nil {
		return nil, "", fmt.Errorf("%s: state: %w", dir, err)
	}
	if len(st.VCPUs) != st.CPUs || st.CPUs < 1 || st.MemBytes != sn.MemBytes {
		return nil, "", fmt.Errorf("%s: state of %d vCPUs holds %d, memory %d (snapshot %d)", dir, st.CPUs, len(st.VCPUs), st.MemBytes, sn.MemBytes)
	}
	step("state")
	sys, err := kvm.Open("/dev/kvm")
	if err != nil {
		return nil, "", err
	}
	vm, err := sys.CreateVM()
	if err == nil {
		err = vm.SetIdentityMapAddr(boot.IdentityMapAddr)
	}
	if err == nil {
		err = vm.SetTSSAddr(boot.TSSAddr)
	}
	if err == nil {
		err = vm.CreateIRQChip()
	}
	if err == nil {
		err = vm.CreatePIT2(kvm.PITSpeakerDummy)
	}
	if err != nil {
		return nil, "", err
	}
	step("vm")
	if err := floorMem(vm, dir, st.MemBytes); err != nil {
		return nil, "", err
	}
	step("mem")
	var vcpus []*kvm.VCPU
	for i := 0; i < st.CPUs; i++ {
		c, err := vm.CreateVCPU(i)
		if err != nil {
			return nil, "", err
		}
		vcpus = append(vcpus, c)
	}
	step("vcpus")
	if err := floorVMState(vm, st.VM); err != nil {
		return nil, "", err
	}
	for i, c := range vcpus {
		if err := floorVCPUState(c, &st.VCPUs[i]); err != nil {
			return nil, "", fmt.Errorf("vcpu %d: %w", i, err)
		}
	}
	step("load")
	return vcpus, strings.Join(ph, " "), nil
}

// floorMem maps dir's mem MAP_PRIVATE as guest RAM, in its slots.
func floorMem(vm *kvm.VM, dir string, size uint64) error {
	f, err := os.Open(dir + "/" + snapshot.MemFile)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	for i, r := range boot.RAMLayout(size) {
		if err := vm.SetUserMemoryRegion(kvm.MemoryRegion{Slot: uint32(i), GuestPhysAddr: r.GPA, MemorySize: r.Size,
			UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[r.Offset])))}); err != nil {
			return err
		}
	}
	return nil
}

// floorVMState loads the PIT, the clock and the three irqchips.
func floorVMState(vm *kvm.VM, st vmm.VMState) error {
	pit, err := vmm.FromRaw[kvm.PITState2](st.PIT, "pit")
	if err != nil {
		return err
	}
	if err := vm.SetPIT2(pit); err != nil {
		return err
	}
	if err := vm.SetClock(kvm.ClockData{Clock: st.Clock}); err != nil {
		return err
	}
	for i, b := range [][]byte{st.PICMaster, st.PICSlave, st.IOAPIC} {
		c, err := vmm.FromRaw[kvm.IRQChip](b, "irqchip")
		if err != nil {
			return err
		}
		c.ChipID = uint32(i)
		if err := vm.SetIRQChip(c); err != nil {
			return err
		}
	}
	return nil
}

// floorVCPUState loads one vCPU's saved state, in the VMM's order.
func floorVCPUState(c *kvm.VCPU, st *vmm.VCPUState) error {
	x, err := vmm.FromRaw[kvm.XSave](st.XSave, "xsave")
	if err != nil {
		return err
	}
	d, err := vmm.FromRaw[kvm.DebugRegs](st.DebugRegs, "debugregs")
	if err != nil {
		return err
	}
	l, err := vmm.FromRaw[kvm.LAPIC](st.LAPIC, "lapic")
	if err != nil {
		return err
	}
	ev, err := vmm.FromRaw[kvm.VCPUEvents](st.Events, "vcpu events")
	if err != nil {
		return err
	}
	for _, f := range []func() error{
		func() error { return c.SetCPUID2(st.CPUID) },
		func() error { return c.SetMPState(kvm.MPState{State: st.MPState}) },
		func() error { return c.SetRegs(st.Regs) },
		func() error { return c.SetSregs(st.Sregs) },
		func() error { return c.SetXSave(x) },
		func() error { return c.SetXCRs(st.XCRs) },
		func() error { return c.SetDebugRegs(d) },
		func() error { return c.SetLAPIC(l) },
		func() error { return setMSRs(c, st.MSRs) },
		func() error { return c.SetVCPUEvents(ev) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// setMSRs sets ms in one call or, if the host refuses one, one by one,
// skipping the refused ones (as the VMM's restore does).
func setMSRs(c *kvm.VCPU, ms []kvm.MSR) error {
	if c.SetMSRs(ms) == nil {
		return nil
	}
	for i := range ms {
		c.SetMSRs(ms[i : i+1])
	}
	return nil
}

// floorRun starts `sandfs bench floor snap` and returns the time from its
// start to its "running" line, and the phases it printed.
func floorRun(ctx context.Context, snap string) (time.Duration, string, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "bench", "floor", snap)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := now()
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	d := since(start)
	phases, ok := strings.CutPrefix(strings.TrimSpace(line), "running ")
	if !ok {
		return 0, "", fmt.Errorf("floor: %q, %v; stderr: %s", line, err, stderr.String())
	}
	return d, phases, nil
}
