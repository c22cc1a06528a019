package vmm

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// closeHook is a device Close hook that reads guest RAM (a fault if RAM is
// already unmapped) and counts its calls.
func closeHook(t *testing.T, m *Machine, calls *atomic.Int32) Hooks {
	mem := m.Memory()
	return Hooks{Close: func() error {
		b, err := mem.Slice(0x100000, 4096)
		if err != nil {
			t.Errorf("Close hook: %v", err)
			return nil
		}
		_ = b[0] + b[4095] // SIGSEGV if RAM was unmapped first
		calls.Add(1)
		return nil
	}}
}

// TestCloseWithoutStart: a machine that never started still runs its
// devices' Close hooks (vsock listeners, sockets), once.
func TestCloseWithoutStart(t *testing.T) {
	m := newTestMachine(t, 1, "forever", &console{}, "")
	var calls atomic.Int32
	if err := m.AddHooks("dev", closeHook(t, m, &calls)); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("device Close hook ran %d times, want 1", n)
	}
	if err := m.Start(); !errors.Is(err, ErrEnded) {
		t.Errorf("Start after Close = %v, want ErrEnded", err)
	}
}

// TestCloseRunningRace closes running machines at once and after a short
// run, with control calls racing: Close must wait for the vCPU goroutines
// and the device Close hooks before it unmaps kvm_run areas and RAM (the
// crash was SIGSEGV in vcpu.kick from reap, concurrent with close).
func TestCloseRunningRace(t *testing.T) {
	for i := 0; i < 8; i++ {
		m := newTestMachine(t, 2, "forever", &console{}, "")
		var calls atomic.Int32
		if err := m.AddHooks("dev", closeHook(t, m, &calls)); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%4) * 20 * time.Millisecond)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); m.Pause(); m.Resume() }()
		go func() { defer wg.Done(); m.Close() }()
		wg.Wait()
		m.Close()
		if n := calls.Load(); n != 1 {
			t.Errorf("round %d: device Close hook ran %d times, want 1", i, n)
		}
		if err := m.Pause(); !errors.Is(err, ErrEnded) {
			t.Errorf("round %d: Pause after Close = %v, want ErrEnded", i, err)
		}
		if r, _ := m.Exit(); r != ExitStopped {
			t.Errorf("round %d: exit %q, want stopped", i, r)
		}
	}
}
