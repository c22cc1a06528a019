package probe_test

import (
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm/kvm"
	"sandfs/vmm/probe"
)

// TestTestGuestRuns: where guests run natively (a KVM host, or the lab),
// the timed test guest takes every port-I/O exit and halts.
func TestTestGuestRuns(t *testing.T) {
	testenv.NeedGuests(t)
	sys, err := kvm.Open("/dev/kvm")
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	r, err := probe.RunTestGuest(sys, 10_000_000, 1000, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exits != 1000 || r.Loops != 10_000_000 {
		t.Fatalf("exits %d (want 1000), loops %d", r.Exits, r.Loops)
	}
	t.Logf("test guest: %.3g loop iter/s, %.3g PIO exits/s (%.1f µs/exit)",
		r.LoopsPerSec(), r.ExitsPerSec(), 1e6/r.ExitsPerSec())
}

// TestTestGuestNoMachine: a machine that cannot be made is an error, not a
// panic in its own clean-up (a zero System's fd is 0, not a KVM fd, so
// KVM_CREATE_VM fails). Runs anywhere.
func TestTestGuestNoMachine(t *testing.T) {
	if _, err := probe.RunTestGuest(new(kvm.System), 1, 1, time.Second); err == nil {
		t.Fatal("RunTestGuest on a non-KVM fd: no error")
	}
}
