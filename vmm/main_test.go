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

// waitFor polls the console until it contains s.
func (c *console) waitFor(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(c.String(), s) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("console has no %q after %v; console:\n%s", s, d, tail(c.String(), 3000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func countTicks(s string) int { return strings.Count(s, "tick ") }
