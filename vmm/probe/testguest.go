package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/vmm/kvm"
)

// TestGuestResult is what RunTestGuest measured.
type TestGuestResult struct {
	Loops    uint32        // iterations of the tight loop
	LoopTime time.Duration // from the first KVM_RUN to the loop's OUT
	Exits    int           // port-I/O exits taken in the exit test
	ExitTime time.Duration
}

// LoopsPerSec and ExitsPerSec are the guest's speed figures.
func (r TestGuestResult) LoopsPerSec() float64 { return float64(r.Loops) / r.LoopTime.Seconds() }
func (r TestGuestResult) ExitsPerSec() float64 { return float64(r.Exits) / r.ExitTime.Seconds() }

// Test-guest ports.
const (
	portLoopDone = 0x10
	portExit     = 0x11
	portFinal    = 0x12
	finalValue   = 0x42
	codeAddr     = 0x1000
	guestMemSize = 0x10000
)

// testGuestCode is 16-bit real-mode code loaded at codeAddr:
//
//	66 b9 NN NN NN NN   mov ecx, loops
//	66 49               dec ecx        <- loop
//	75 fc               jnz loop
//	b0 01               mov al, 1
//	e6 10               out 0x10, al   ; the loop is done
//	bb NN NN            mov bx, exits
//	e6 11               out 0x11, al   <- exit loop: one PIO exit per iteration
//	4b                  dec bx
//	75 fb               jnz exit loop
//	b0 42               mov al, 0x42
//	e6 12               out 0x12, al   ; final value
//	f4                  hlt
func testGuestCode(loops uint32, exits uint16) []byte {
	code := []byte{0x66, 0xb9, 0, 0, 0, 0, 0x66, 0x49, 0x75, 0xfc, 0xb0, 0x01, 0xe6, portLoopDone,
		0xbb, 0, 0, 0xe6, portExit, 0x4b, 0x75, 0xfb, 0xb0, finalValue, 0xe6, portFinal, 0xf4}
	binary.LittleEndian.PutUint32(code[2:], loops)
	binary.LittleEndian.PutUint16(code[15:], exits)
	return code
}

// RunTestGuest creates a VM with 64 KiB of RAM and one real-mode vCPU on sys
// and runs testGuestCode: a loop of `loops` iterations, then `exits`
// port-I/O exits, then OUT 0x42 and HLT. A guest that runs past timeout is
// abandoned (its goroutine ends when KVM_RUN next returns) and reported.
func RunTestGuest(sys *kvm.System, loops uint32, exits uint16, timeout time.Duration) (TestGuestResult, error) {
	type out struct {
		r   TestGuestResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		r, err := runTestGuest(sys, loops, max(exits, 1))
		ch <- out{r, err}
	}()
	select {
	case o := <-ch:
		return o.r, o.err
	case <-time.After(timeout):
		return TestGuestResult{}, fmt.Errorf("test guest did not finish in %v", timeout)
	}
}

// runTestGuest boots the test guest on a machine of its own and runs it
// to its HLT, timing its loop and its exits.
func runTestGuest(sys *kvm.System, loops uint32, exits uint16) (TestGuestResult, error) {
	m, err := newTestMachine(sys, testGuestCode(loops, exits))
	if err != nil {
		return TestGuestResult{}, err
	}
	defer m.close()
	return m.run(loops)
}

// testMachine is the probe's machine: one vCPU in real mode at codeAddr,
// guestMemSize bytes of memory.
type testMachine struct {
	vm  *kvm.VM
	mem []byte
	cpu *kvm.VCPU
}

// newTestMachine makes the machine with code loaded at codeAddr.
func newTestMachine(sys *kvm.System, code []byte) (_ *testMachine, err error) {
	// m, not the result: an error return sets the result to nil before
	// the deferred close runs.
	m := &testMachine{}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.vm, err = sys.CreateVM(); err != nil {
		return nil, err
	}
	if err := m.vm.SetTSSAddr(0xfffbd000); err != nil { // VMX without unrestricted guest needs it
		return nil, err
	}
	if m.mem, err = unix.Mmap(-1, 0, guestMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
		return nil, fmt.Errorf("mmap guest memory: %w", err)
	}
	copy(m.mem[codeAddr:], code)
	if err := m.vm.SetUserMemoryRegion(kvm.MemoryRegion{
		MemorySize: guestMemSize, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&m.mem[0]))),
	}); err != nil {
		return nil, err
	}
	if m.cpu, err = m.vm.CreateVCPU(0); err != nil {
		return nil, err
	}
	sregs, err := m.cpu.GetSregs()
	if err != nil {
		return nil, err
	}
	sregs.CS.Base, sregs.CS.Selector = 0, 0
	if err := m.cpu.SetSregs(sregs); err != nil {
		return nil, err
	}
	if err := m.cpu.SetRegs(kvm.Regs{RIP: codeAddr, RFLAGS: 2}); err != nil {
		return nil, err
	}
	return m, nil
}

// close releases the vCPU, the memory and the VM, those that exist.
func (m *testMachine) close() {
	if m.cpu != nil {
		m.cpu.Close()
	}
	if m.mem != nil {
		unix.Munmap(m.mem)
	}
	if m.vm != nil {
		m.vm.Close()
	}
}

// run runs the guest until it halts: the OUT to portLoopDone ends the
// timed loop, each OUT to portExit is one timed exit, the OUT of
// finalValue to portFinal ends them.
func (m *testMachine) run(loops uint32) (TestGuestResult, error) {
	var r TestGuestResult
	start := time.Now()
	var exitStart time.Time
	for {
		if err := m.cpu.Run(); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return r, err
		}
		switch reason := m.cpu.ExitReason(); reason {
		case kvm.ExitIO:
			io := m.cpu.IOExit()
			switch io.Port {
			case portLoopDone:
				r.LoopTime, r.Loops = time.Since(start), loops
				exitStart = time.Now()
			case portExit:
				r.Exits++
			case portFinal:
				r.ExitTime = time.Since(exitStart)
				if len(io.Data) == 0 || io.Data[0] != finalValue {
					return r, fmt.Errorf("test guest wrote %v, want %#x", io.Data, finalValue)
				}
			default:
				return r, fmt.Errorf("test guest: unexpected OUT to port %#x", io.Port)
			}
		case kvm.ExitHLT:
			if r.ExitTime == 0 {
				return r, errors.New("test guest halted early")
			}
			return r, nil
		default:
			return r, fmt.Errorf("test guest stopped with KVM exit reason %d", reason)
		}
	}
}
