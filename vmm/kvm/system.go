package kvm

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// APIVersion is the only KVM_GET_API_VERSION this package speaks.
const APIVersion = 12

// System is an open /dev/kvm.
type System struct {
	fd int
}

// Open opens path (normally /dev/kvm) and checks the API version.
func Open(path string) (*System, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &System{fd: fd}
	v, err := ioctl(fd, "KVM_GET_API_VERSION", kvmGetAPIVersion, 0)
	if err != nil {
		s.Close()
		return nil, err
	}
	if v != APIVersion {
		s.Close()
		return nil, fmt.Errorf("open %s: KVM API version %d, want %d", path, v, APIVersion)
	}
	return s, nil
}

// FD returns the /dev/kvm file descriptor.
func (s *System) FD() int { return s.fd }

// Close closes /dev/kvm; VMs created from it stay valid.
func (s *System) Close() error { return unix.Close(s.fd) }

// CheckExtension returns KVM_CHECK_EXTENSION for capability c (0: absent).
func (s *System) CheckExtension(c int) int {
	r, err := ioctl(s.fd, "KVM_CHECK_EXTENSION", kvmCheckExtension, uintptr(c))
	if err != nil {
		return 0
	}
	return int(r)
}

// VCPUMmapSize is the size of the kvm_run mapping of each vCPU fd.
func (s *System) VCPUMmapSize() (int, error) {
	r, err := ioctl(s.fd, "KVM_GET_VCPU_MMAP_SIZE", kvmGetVCPUMmapSize, 0)
	return int(r), err
}

// CreateVM creates a VM (machine type 0, the default). KVM_CREATE_VM
// fails with EINTR when a signal is pending while it registers the VM's
// MMU notifier (mm_take_all_locks, longer the more mappings the process
// has), and a Go process gets SIGURG for goroutine preemption at any
// time (seen in the lab: "KVM_CREATE_VM: interrupted system call"). So
// the calling thread blocks every signal for the ioctl; one that arrives
// meanwhile is delivered after.
func (s *System) CreateVM() (*VM, error) {
	r, err := withSignalsBlocked(func() (uintptr, error) {
		return ioctl(s.fd, "KVM_CREATE_VM", kvmCreateVM, 0)
	})
	if err != nil {
		return nil, err
	}
	vm := &VM{fd: int(r), sys: s}
	unix.CloseOnExec(vm.fd)
	mmapSize, err := s.VCPUMmapSize()
	if err != nil {
		vm.Close()
		return nil, err
	}
	vm.runSize = mmapSize
	return vm, nil
}

// SupportedCPUID returns KVM_GET_SUPPORTED_CPUID.
func (s *System) SupportedCPUID() ([]CPUIDEntry, error) {
	return getCPUID(s.fd, "KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID)
}

// MSRIndexList returns KVM_GET_MSR_INDEX_LIST: the MSRs KVM saves and
// restores for a vCPU.
func (s *System) MSRIndexList() ([]uint32, error) {
	n := uint32(0)
	// First call with nmsrs=0 fails with E2BIG and reports the count.
	_ = ioctlPtr(s.fd, "KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList, unsafe.Pointer(&n))
	if n == 0 {
		return nil, fmt.Errorf("KVM_GET_MSR_INDEX_LIST: no MSRs")
	}
	buf := make([]uint32, 1+n)
	buf[0] = n
	if err := ioctlPtr(s.fd, "KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList, unsafe.Pointer(&buf[0])); err != nil {
		return nil, err
	}
	return append([]uint32(nil), buf[1:1+buf[0]]...), nil
}

// withSignalsBlocked runs f on the current OS thread with every signal
// blocked (SIGKILL and SIGSTOP cannot be), then restores the thread's
// mask.
func withSignalsBlocked(f func() (uintptr, error)) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all := unix.Sigset_t{}
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	var old unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, &old); err != nil {
		return 0, fmt.Errorf("blocking signals: %w", err)
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return f()
}
