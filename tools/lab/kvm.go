package lab

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A tiny, self-contained KVM user: enough to create a VM, run a few bytes of
// real-mode code and count exits. Used by the host capability probe and the
// lab's own tests; the project's VMM lives in ./vmm.

// ioctl numbers from linux/kvm.h (_IO/_IOR/_IOW with KVMIO = 0xAE).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46 // _IOW(0xAE, 0x46, 32-byte kvm_userspace_memory_region)
	kvmSetTSSAddr          = 0xAE47
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81 // _IOR(0xAE, 0x81, 144-byte kvm_regs)
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83 // _IOR(0xAE, 0x83, 312-byte kvm_sregs)
	kvmSetSregs            = 0x4138AE84

	kvmExitIO            = 2
	kvmExitHLT           = 5
	kvmExitShutdown      = 8
	kvmExitFailEntry     = 9
	kvmExitInternalError = 17
)

// TestGuestResult is what RunTestGuest measured.
type TestGuestResult struct {
	API       int           // KVM_GET_API_VERSION
	Loops     uint32        // iterations of the tight loop
	LoopTime  time.Duration // KVM_RUN time of the loop (first run until its OUT)
	Exits     int           // port-I/O exits taken in the exit test
	ExitTime  time.Duration
	LastValue byte // the byte the guest wrote at the end (0x42)
}

// LoopsPerSec and ExitsPerSec are the guest's speed figures.
func (r TestGuestResult) LoopsPerSec() float64 { return float64(r.Loops) / r.LoopTime.Seconds() }
func (r TestGuestResult) ExitsPerSec() float64 { return float64(r.Exits) / r.ExitTime.Seconds() }

// testGuestCode is 16-bit real-mode code loaded at 0x1000:
//
//	66 b9 NN NN NN NN   mov ecx, loops
//	66 49               dec ecx        <- loop
//	75 fc               jnz loop
//	b0 01               mov al, 1
//	e6 10               out 0x10, al   ; exit: the loop is done
//	bb NN NN            mov bx, exits
//	e6 11               out 0x11, al   <- exit loop: one PIO exit per iteration
//	4b                  dec bx
//	75 fb               jnz exit loop
//	b0 42               mov al, 0x42
//	e6 12               out 0x12, al   ; final value
//	f4                  hlt
func testGuestCode(loops uint32, exits uint16) []byte {
	code := []byte{0x66, 0xb9, 0, 0, 0, 0, 0x66, 0x49, 0x75, 0xfc, 0xb0, 0x01, 0xe6, 0x10,
		0xbb, 0, 0, 0xe6, 0x11, 0x4b, 0x75, 0xfb, 0xb0, 0x42, 0xe6, 0x12, 0xf4}
	binary.LittleEndian.PutUint32(code[2:], loops)
	binary.LittleEndian.PutUint16(code[15:], exits)
	return code
}

// ioctlPtr is ioctl for requests whose argument points to Go memory. The
// pointer must become a uintptr inside the Syscall argument list itself
// (unsafe.Pointer rule 4): passed through another function as a uintptr, a
// stack growth could move the struct and the kernel would use the old stack.
func ioctlPtr(fd int, req uintptr, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(p)); e != 0 {
		return e
	}
	return nil
}

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return r, e
	}
	return r, nil
}

// RunTestGuest opens dev (normally /dev/kvm), creates a VM with 64 KiB of
// RAM and one vCPU in real mode, and runs testGuestCode: a loop of `loops`
// iterations, then `exits` port-I/O exits, then OUT 0x42 and HLT.
func RunTestGuest(dev string, loops uint32, exits uint16, timeout time.Duration) (TestGuestResult, error) {
	var r TestGuestResult
	if exits == 0 {
		exits = 1
	}
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("kvm: open %q: %v", dev, err)
	}
	defer f.Close()
	kvm := int(f.Fd())
	api, err := ioctl(kvm, kvmGetAPIVersion, 0)
	if err != nil {
		return r, fmt.Errorf("kvm: KVM_GET_API_VERSION: %v", err)
	}
	r.API = int(api)
	if api != 12 {
		return r, fmt.Errorf("kvm: KVM_GET_API_VERSION: %d, want 12", api)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return r, fmt.Errorf("kvm: KVM_CREATE_VM: %v", err)
	}
	vm := int(vmfd)
	defer unix.Close(vm)
	ioctl(vm, kvmSetTSSAddr, 0xfffbd000) // needed on Intel without unrestricted guest; harmless elsewhere

	const memSize = 0x10000
	mem, err := unix.Mmap(-1, 0, memSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return r, fmt.Errorf("kvm: mmap guest memory: %v", err)
	}
	defer unix.Munmap(mem)
	copy(mem[0x1000:], testGuestCode(loops, exits))
	region := struct {
		slot, flags            uint32
		gpa, size, userspaceVA uint64
	}{0, 0, 0, memSize, uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if err := ioctlPtr(vm, kvmSetUserMemoryRegion, unsafe.Pointer(&region)); err != nil {
		return r, fmt.Errorf("kvm: KVM_SET_USER_MEMORY_REGION: %v", err)
	}
	cpufd, err := ioctl(vm, kvmCreateVCPU, 0)
	if err != nil {
		return r, fmt.Errorf("kvm: KVM_CREATE_VCPU: %v", err)
	}
	cpu := int(cpufd)
	defer unix.Close(cpu)
	sz, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return r, fmt.Errorf("kvm: KVM_GET_VCPU_MMAP_SIZE: %v", err)
	}
	run, err := unix.Mmap(cpu, 0, int(sz), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return r, fmt.Errorf("kvm: mmap kvm_run: %v", err)
	}
	defer unix.Munmap(run)

	var sregs [312]byte
	if err := ioctlPtr(cpu, kvmGetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return r, fmt.Errorf("kvm: KVM_GET_SREGS: %v", err)
	}
	// cs: struct kvm_segment at offset 0: base u64, limit u32, selector u16.
	binary.LittleEndian.PutUint64(sregs[0:], 0)
	binary.LittleEndian.PutUint16(sregs[12:], 0)
	if err := ioctlPtr(cpu, kvmSetSregs, unsafe.Pointer(&sregs[0])); err != nil {
		return r, fmt.Errorf("kvm: KVM_SET_SREGS: %v", err)
	}
	var regs [18]uint64 // rax..r15, rip, rflags
	regs[16] = 0x1000
	regs[17] = 2
	if err := ioctlPtr(cpu, kvmSetRegs, unsafe.Pointer(&regs[0])); err != nil {
		return r, fmt.Errorf("kvm: KVM_SET_REGS: %v", err)
	}

	// A watchdog: KVM_RUN returns EINTR when the thread gets a signal, but Go
	// cannot target one thread portably, so we just bound the total time.
	deadline := time.Now().Add(timeout)
	start := time.Now()
	var exitStart time.Time
	for {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("kvm: test guest did not finish within %v", timeout)
		}
		if _, err := ioctl(cpu, kvmRun, 0); err != nil {
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			return r, fmt.Errorf("kvm: KVM_RUN: %v", err)
		}
		reason := binary.LittleEndian.Uint32(run[8:])
		switch reason {
		case kvmExitIO:
			// struct kvm_run.io at offset 32: direction u8, size u8, port u16, count u32, data_offset u64.
			port := binary.LittleEndian.Uint16(run[34:])
			off := binary.LittleEndian.Uint64(run[40:])
			val := run[off]
			switch port {
			case 0x10:
				r.LoopTime = time.Since(start)
				r.Loops = loops
				exitStart = time.Now()
			case 0x11:
				r.Exits++
			case 0x12:
				r.ExitTime = time.Since(exitStart)
				r.LastValue = val
			default:
				return r, fmt.Errorf("kvm: unexpected OUT to port %#x", port)
			}
		case kvmExitHLT:
			if r.LastValue != 0x42 {
				return r, fmt.Errorf("kvm: guest halted early (last OUT value %#x)", r.LastValue)
			}
			return r, nil
		case kvmExitShutdown, kvmExitFailEntry, kvmExitInternalError:
			return r, fmt.Errorf("kvm: test guest stopped with exit reason %d", reason)
		default:
			return r, fmt.Errorf("kvm: unexpected exit reason %d", reason)
		}
	}
}
