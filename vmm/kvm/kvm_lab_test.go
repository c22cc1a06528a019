package kvm_test

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
	"sandfs/vmm/kvm"
)

func needKVM(t *testing.T) *kvm.System {
	t.Helper()
	testenv.NeedGuests(t)
	s, err := kvm.Open("/dev/kvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// realModeVM is a kvm.VM with 64 KiB of RAM holding code at 0x1000, one vCPU in
// real mode about to run it.
func realModeVM(t *testing.T, s *kvm.System, code []byte) (*kvm.VM, *kvm.VCPU) {
	vm, err := s.CreateVM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	mem, err := unix.Mmap(-1, 0, 0x10000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	copy(mem[0x1000:], code)
	if err := vm.SetUserMemoryRegion(kvm.MemoryRegion{MemorySize: 0x10000, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}); err != nil {
		t.Fatal(err)
	}
	c, err := vm.CreateVCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sr, err := c.GetSregs()
	if err != nil {
		t.Fatal(err)
	}
	sr.CS.Base, sr.CS.Selector = 0, 0
	if err := c.SetSregs(sr); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRegs(kvm.Regs{RIP: 0x1000, RFLAGS: 2}); err != nil {
		t.Fatal(err)
	}
	return vm, c
}

func TestRunIOAndHalt(t *testing.T) {
	s := needKVM(t)
	if s.CheckExtension(kvm.CapImmediateExit) == 0 {
		t.Errorf("no KVM_CAP_IMMEDIATE_EXIT")
	}
	// mov al, 0x42; out 0x80, al; hlt
	_, c := realModeVM(t, s, []byte{0xb0, 0x42, 0xe6, 0x80, 0xf4})
	ents, err := s.SupportedCPUID()
	if err != nil || len(ents) == 0 {
		t.Fatalf("SupportedCPUID = %d entries, %v", len(ents), err)
	}
	if err := c.SetCPUID2(ents); err != nil { // before the first KVM_RUN (6.1 refuses changes after)
		t.Errorf("SetCPUID2: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if r := c.ExitReason(); r != kvm.ExitIO {
		t.Fatalf("exit = %d; want KVM_EXIT_IO", r)
	}
	if io := c.IOExit(); !io.Out || io.Port != 0x80 || io.Size != 1 || len(io.Data) != 1 || io.Data[0] != 0x42 {
		t.Errorf("io exit = %+v", io)
	}
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if r := c.ExitReason(); r != kvm.ExitHLT {
		t.Errorf("exit = %d; want KVM_EXIT_HLT", r)
	}
	regs, err := c.GetRegs()
	if err != nil || regs.RIP != 0x1005 {
		t.Errorf("RIP = %#x, %v; want 0x1005", regs.RIP, err)
	}
	msrs, err := s.MSRIndexList()
	if err != nil || len(msrs) == 0 {
		t.Fatalf("MSRIndexList = %d, %v", len(msrs), err)
	}
	got, err := c.ReadableMSRs(msrs)
	if err != nil || len(got) == 0 {
		t.Errorf("ReadableMSRs = %d of %d, %v", len(got), len(msrs), err)
	}
}

// TestKick checks both ways out of KVM_RUN: immediate_exit before entry,
// and a signal to the thread while the guest spins.
func TestKick(t *testing.T) {
	s := needKVM(t)
	_, c := realModeVM(t, s, []byte{0xeb, 0xfe}) // jmp $
	const sig = syscall.Signal(40)
	signal.Notify(make(chan os.Signal, 1), sig)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	c.SetImmediateExit(true)
	if err := c.Run(); !errors.Is(err, unix.EINTR) {
		t.Fatalf("Run with immediate_exit = %v; want EINTR", err)
	}
	c.SetImmediateExit(false)

	tid := unix.Gettid()
	go func() {
		time.Sleep(200 * time.Millisecond)
		unix.Tgkill(os.Getpid(), tid, sig)
	}()
	start := time.Now()
	for {
		err := c.Run()
		if errors.Is(err, unix.EINTR) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("signal did not interrupt KVM_RUN")
		}
	}
}

// TestCreateVMUnderSignals: KVM_CREATE_VM on a thread that signals keep
// interrupting (as Go's preemption does with SIGURG), in a process with
// many mappings (its MMU notifier registration takes every mapping's
// lock and gives up on a pending signal), still creates every VM.
func TestCreateVMUnderSignals(t *testing.T) {
	s := needKVM(t)
	// Many mappings that cannot merge: alternate protections.
	for i := 0; i < 20000; i++ {
		prot := unix.PROT_READ
		if i%2 == 0 {
			prot |= unix.PROT_WRITE
		}
		m, err := unix.Mmap(-1, 0, 4096, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid, pid := unix.Gettid(), unix.Getpid()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				unix.Tgkill(pid, tid, unix.SIGURG)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 50; i++ {
		vm, err := s.CreateVM()
		if err != nil {
			t.Fatalf("VM %d: %v", i, err)
		}
		vm.Close()
	}
}
