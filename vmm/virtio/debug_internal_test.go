package virtio

import (
	"strings"
	"sync"
	"testing"
	"time"
)

type quietDev struct{}

func (quietDev) ID() uint32                       { return 99 }
func (quietDev) Features() uint64                 { return 0 }
func (quietDev) QueueMax() []uint16               { return []uint16{8} }
func (quietDev) ReadConfig(off uint64, b []byte)  {}
func (quietDev) WriteConfig(off uint64, b []byte) {}
func (quietDev) Activate(t *Transport) error      { return nil }
func (quietDev) Reset()                           {}
func (quietDev) Notify(q int)                     {}

// TestDebugDumpSkipsClosed: a closed transport leaves the SIGUSR1 dump,
// which would otherwise read its rings in guest RAM the VMM unmaps next
// (a VMM dumped while it ended after a guest reset died with SIGSEGV).
func TestDebugDumpSkipsClosed(t *testing.T) {
	on := debugReg.on
	debugReg.on = true
	t.Cleanup(func() { debugReg.on = on })
	tr := NewTransport(quietDev{}, nil, nil, 5)
	if d := DebugDump(); !strings.Contains(d, "virtio id=99 ") {
		t.Fatalf("dump before Close lacks the transport:\n%s", d)
	}
	tr.Close()
	if d := DebugDump(); strings.Contains(d, "virtio id=99 ") {
		t.Errorf("dump after Close still reads the transport:\n%s", d)
	}
}

// TestLockForDump: a dump takes a lock its holder releases within a
// moment, and gives up on one held for good after dumpLockWait.
func TestLockForDump(t *testing.T) {
	var mu sync.Mutex
	mu.Lock()
	time.AfterFunc(20*time.Millisecond, mu.Unlock)
	if !LockForDump(&mu) {
		t.Fatal("a lock released after 20 ms was not taken")
	}
	// Held now, for good.
	t0 := time.Now()
	if LockForDump(&mu) {
		t.Fatal("a lock held for good was taken")
	}
	if d := time.Since(t0); d < dumpLockWait || d > 10*dumpLockWait {
		t.Errorf("gave up after %v; want about %v", d, dumpLockWait)
	}
}
