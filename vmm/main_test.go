package vmm

import (
	"os"
	"strings"
	"testing"
	"time"

	"sandfs/test/syncbuf"
	"sandfs/vmm/testguest"
)

// TestMain doubles as the guest's /init (the test binary is copied into the
// initramfs).
func TestMain(m *testing.M) {
	if os.Getpid() == 1 && os.Args[0] == "/init" {
		testguest.Init()
	}
	os.Exit(m.Run())
}

// console is the guest's serial output, goroutine-safe (syncbuf).
type console struct{ syncbuf.Buffer }

// waitFor polls the console of m until it contains s; it fails at once
// if m ends first, and after d with where m's vCPUs stand (stallReport:
// a guest booted with "quiet" prints nothing before s).
func (c *console) waitFor(t *testing.T, m *Machine, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(c.String(), s) {
		if r, err := m.Exit(); r != ExitRunning {
			t.Fatalf("machine ended (%v, %v) before %q on the console; console:\n%s", r, err, s, tail(c.String(), 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("console has no %q after %v; vCPUs:\n%s\nconsole:\n%s", s, d, stallReport(m), tail(c.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDone waits d for m to end; on timeout it fails as waitFor does.
func (c *console) waitDone(t *testing.T, m *Machine, d time.Duration, what string) {
	t.Helper()
	select {
	case <-m.Done():
	case <-time.After(d):
		t.Fatalf("%s after %v; vCPUs:\n%s\nconsole:\n%s", what, d, stallReport(m), tail(c.String(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func countTicks(s string) int { return strings.Count(s, "tick ") }

// stallReport says where the vCPUs of a machine a test gave up on stand:
// its StallReport twice, a second apart (a RIP that moves and exits that
// grow: a guest still running). tools/lab/run-tests.sh reads the vCPU
// RIPs for the lab's own nested-SVM stall and runs such a test again;
// resolve the others with the kernel build's System.map (the guest
// kernel has no KASLR).
func stallReport(m *Machine) string {
	first := m.StallReport()
	time.Sleep(time.Second)
	return first + "a second later:\n" + m.StallReport()
}
