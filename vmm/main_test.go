package vmm

import (
	"fmt"
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

// waitBoot waits for s on the console of a booting machine; on timeout it
// fails with where the vCPUs are (vcpuTrace), since a guest booted with
// "quiet" prints nothing before s.
func (c *console) waitBoot(t *testing.T, m *Machine, s string) {
	t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for !strings.Contains(c.String(), s) {
		if r, err := m.Exit(); r != ExitRunning {
			t.Fatalf("machine ended (%v, %v) before %q on the console; console:\n%s", r, err, s, tail(c.String(), 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("console has no %q after %v; vCPUs: %s; console:\n%s", s, bootTimeout, vcpuTrace(m), tail(c.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// vcpuTrace samples each vCPU's RIP and MP state five times, 200 ms apart
// (resolve RIPs with the kernel build's System.map: the guest kernel has
// no KASLR).
func vcpuTrace(m *Machine) string {
	var b strings.Builder
	for range 5 {
		if err := m.Pause(); err != nil {
			return b.String() + "pause: " + err.Error()
		}
		st, err := m.Save()
		if err != nil {
			m.Resume()
			return b.String() + "save: " + err.Error()
		}
		for _, v := range st.VCPUs {
			fmt.Fprintf(&b, "[cpu%d rip=%#x rsp=%#x rflags=%#x mp=%d] ", v.ID, v.Regs.RIP, v.Regs.RSP, v.Regs.RFLAGS, v.MPState)
		}
		if err := m.Resume(); err != nil {
			return b.String() + "resume: " + err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return b.String()
}
