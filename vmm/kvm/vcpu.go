package kvm

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VCPU is a vCPU fd and its mapped struct kvm_run. Run must be called from
// one OS thread (the vCPU's goroutine, locked); SetImmediateExit may be called
// from any goroutine.
type VCPU struct {
	fd  int
	ID  int
	run []byte // struct kvm_run, shared with the kernel
}

// FD returns the vCPU file descriptor.
func (c *VCPU) FD() int { return c.fd }

// Close unmaps kvm_run and closes the fd.
func (c *VCPU) Close() error {
	unix.Munmap(c.run)
	return unix.Close(c.fd)
}

// Run enters the guest (KVM_RUN) until the next exit. An EINTR (a signal,
// or ImmediateExit set) is returned as is, wrapped: errors.Is(err, unix.EINTR).
func (c *VCPU) Run() error {
	_, err := ioctl(c.fd, "KVM_RUN", kvmRun, 0)
	return err
}

// struct kvm_run offsets (linux/kvm.h).
const (
	runImmediateExit = 1  // __u8 immediate_exit
	runExitReason    = 8  // __u32 exit_reason
	runExitUnion     = 32 // the exit-specific union
)

// SetImmediateExit sets kvm_run.immediate_exit: while it is 1, KVM_RUN
// completes pending I/O and returns EINTR without entering the guest.
func (c *VCPU) SetImmediateExit(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	// The byte shares a 32-bit word with request_interrupt_window (byte 0)
	// and padding; only this package writes it, so a 32-bit atomic store of
	// the word with byte 0 kept is safe.
	p := (*uint32)(unsafe.Pointer(&c.run[0]))
	for {
		old := atomic.LoadUint32(p)
		nw := old&^0xff00 | v<<8
		if atomic.CompareAndSwapUint32(p, old, nw) {
			return
		}
	}
}

// ExitReason returns kvm_run.exit_reason after Run.
func (c *VCPU) ExitReason() uint32 {
	return binary.LittleEndian.Uint32(c.run[runExitReason:])
}

// Exit reasons (KVM_EXIT_*).
const (
	ExitUnknown       = 0
	ExitException     = 1
	ExitIO            = 2
	ExitHypercall     = 3
	ExitDebug         = 4
	ExitHLT           = 5
	ExitMMIO          = 6
	ExitIRQWindowOpen = 7
	ExitShutdown      = 8
	ExitFailEntry     = 9
	ExitIntr          = 10
	ExitInternalError = 17
	ExitSystemEvent   = 24
)

// IO is the kvm_run.io exit: Data aliases the kvm_run page (Count
// accesses of Size bytes each, back to back).
type IO struct {
	Out  bool
	Size int
	Port uint16
	Data []byte
}

// IOExit decodes a KVM_EXIT_IO.
func (c *VCPU) IOExit() IO {
	u := c.run[runExitUnion:]
	size := int(u[1])
	count := int(binary.LittleEndian.Uint32(u[4:]))
	off := binary.LittleEndian.Uint64(u[8:])
	return IO{
		Out:  u[0] == 1, // KVM_EXIT_IO_OUT
		Size: size,
		Port: binary.LittleEndian.Uint16(u[2:]),
		Data: c.run[off : off+uint64(size*count)],
	}
}

// MMIO is the kvm_run.mmio exit; Data aliases kvm_run (fill it on a read).
type MMIO struct {
	Addr  uint64
	Write bool
	Data  []byte
}

// MMIOExit decodes a KVM_EXIT_MMIO.
func (c *VCPU) MMIOExit() MMIO {
	u := c.run[runExitUnion:]
	n := binary.LittleEndian.Uint32(u[16:])
	if n > 8 {
		n = 8
	}
	return MMIO{
		Addr:  binary.LittleEndian.Uint64(u[0:]),
		Write: u[20] != 0,
		Data:  u[8 : 8+n],
	}
}

// System event types (kvm_run.system_event.type).
const (
	SystemEventShutdown = 1 // KVM_SYSTEM_EVENT_SHUTDOWN
	SystemEventReset    = 2 // KVM_SYSTEM_EVENT_RESET
	SystemEventCrash    = 3 // KVM_SYSTEM_EVENT_CRASH
)

// SystemEvent returns kvm_run.system_event.type.
func (c *VCPU) SystemEvent() uint32 {
	return binary.LittleEndian.Uint32(c.run[runExitUnion:])
}

// ExitData returns the first n 64-bit words of the exit union, for
// diagnostics (fail_entry, internal error).
func (c *VCPU) ExitData(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(c.run[runExitUnion+8*i:])
	}
	return out
}
