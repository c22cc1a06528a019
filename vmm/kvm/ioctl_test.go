package kvm

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deepIoctl recurses d frames deep, then reads the byte count of a pipe
// with FIONREAD into a stack variable through ioctlPtr: the way every
// KVM_GET_* / KVM_SET_* wrapper passes its struct.
//
//go:noinline
func deepIoctl(d, fd int) int32 {
	var pad [6]uint64
	if d > 0 {
		pad[d%6] = uint64(deepIoctl(d-1, fd))
		return int32(pad[d%6])
	}
	var n int32
	if err := ioctlPtr(fd, "FIONREAD", unix.TIOCINQ, unsafe.Pointer(&n)); err != nil {
		return -1
	}
	return n
}

// TestIoctlPtrStackMove: the pointer handed to the kernel must stay valid
// when the goroutine's stack is copied (grown) on the way to the syscall.
// ioctlPtr used to convert it to uintptr and pass it through a normal Go
// function (ioctl) whose prologue can grow the stack: the kernel then read
// and wrote the old, freed stack (KVM_GET_* results lost, KVM_SET_* and
// KVM_IRQ_LINE fed stale or reused memory). Every depth here starts a new
// goroutine, so the stack boundary falls at every point of the call chain.
func TestIoctlPtrStackMove(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.Write([]byte("12345")); err != nil {
		t.Fatal(err)
	}
	fd := int(r.Fd())
	bad := 0
	for d := 0; d < 1100; d++ {
		got := make(chan int32)
		go func() { got <- deepIoctl(d, fd) }()
		if n := <-got; n != 5 {
			if bad < 5 {
				t.Errorf("depth %d: FIONREAD through ioctlPtr = %d, want 5", d, n)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of 1100 depths lost the ioctl's result", bad)
	}
}
