package vmm

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm/testguest"
)

func newTestMachine(t *testing.T, cpus int, mode string, con *console, memFile string) *Machine {
	t.Helper()
	testenv.NeedGuests(t)
	k, err := os.ReadFile(testguest.Kernel(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMachine(MachineConfig{
		MemBytes: 256 << 20, CPUs: cpus, Kernel: k, Initrd: testguest.Initrd(t),
		Cmdline: "quiet " + testguest.Mode + "=" + mode, Console: con, MemFile: memFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

const bootTimeout = 60 * time.Second // nested KVM under TCG is slow

func TestBootToInit(t *testing.T) {
	con := &console{}
	m := newTestMachine(t, 2, "reboot", con, "")
	start := time.Now()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitFor(t, m, "SANDFS-GUEST-INIT", bootTimeout)
	t.Logf("init after %v", time.Since(start))
	if !strings.Contains(con.String(), "SANDFS-GUEST-INIT cpus=2") {
		t.Errorf("guest does not see 2 CPUs:\n%s", tail(con.String(), 2000))
	}
	con.waitDone(t, m, bootTimeout, "guest reboot did not end the machine")
	if r, err := m.Wait(); r != ExitReset || err != nil {
		t.Errorf("Wait = %v, %v; want reset, nil", r, err)
	}
}

func TestPauseResume(t *testing.T) {
	con := &console{}
	m := newTestMachine(t, 1, "ticks", con, "")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitFor(t, m, "tick 3\r\n", bootTimeout)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	before := countTicks(con.String())
	time.Sleep(time.Second)
	if after := countTicks(con.String()); after != before {
		t.Errorf("paused guest printed %d ticks", after-before)
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for countTicks(con.String()) < before+3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := countTicks(con.String()); n < before+3 {
		t.Errorf("resumed guest printed %d ticks; want >= 3", n-before)
	}
}

func TestSaveRestore(t *testing.T) {
	con := &console{}
	m := newTestMachine(t, 2, "ticks", con, "")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitFor(t, m, "tick 3\r\n", bootTimeout)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Now()
	if _, err := m.Save(); err != nil {
		t.Fatal(err)
	}
	t.Logf("vCPU+VM+device state alone took %v", time.Since(start))
	start = time.Now()
	if err := m.SaveDir(dir); err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(dir + "/" + MemoryFile)
	var blocks int64
	if sys, ok := st0.Sys().(*syscall.Stat_t); ok {
		blocks = sys.Blocks * 512
	}
	t.Logf("save (state + memory) took %v; mem file %d bytes, %d allocated", time.Since(start), st0.Size(), blocks)
	ticks := countTicks(con.String())
	m.Close()

	st, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	con2 := &console{}
	start = time.Now()
	m2 := newTestMachine(t, 2, "ticks", con2, dir+"/"+MemoryFile)
	if err := m2.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := m2.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore to running took %v", time.Since(start))
	want := "tick " + itoa(ticks+2) + "\r\n"
	con2.waitFor(t, m2, want, 30*time.Second)
	if strings.Contains(con2.String(), "SANDFS-GUEST-INIT") || strings.Contains(con2.String(), "tick 0\r\n") {
		t.Errorf("restored guest rebooted instead of continuing:\n%s", tail(con2.String(), 1000))
	}
}

func itoa(n int) string { return fmtInt(n) }

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// TestBootLog boots verbosely on 2 vCPUs and checks what the kernel says
// about the machine: KVM detected with kvmclock, both CPUs up through the MP
// table, the 16550A found, no XSAVE or other warnings.
func TestBootLog(t *testing.T) {
	testenv.NeedGuests(t)
	k, err := os.ReadFile(testguest.Kernel(t))
	if err != nil {
		t.Fatal(err)
	}
	con := &console{}
	m, err := NewMachine(MachineConfig{MemBytes: 256 << 20, CPUs: 2, Kernel: k, Initrd: testguest.Initrd(t),
		Cmdline: "loglevel=7 " + testguest.Mode + "=reboot", Console: con})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	con.waitDone(t, m, 3*bootTimeout, "no reboot")
	out := con.String()
	for _, want := range []string{
		"Hypervisor detected: KVM", "clocksource: Switched to clocksource kvm-clock",
		"smp: Brought up 1 node, 2 CPUs", "ttyS0 at I/O 0x3f8 (irq = 4", "is a 16550A",
		"SANDFS-GUEST-INIT cpus=2", "reboot: Restarting system",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	for _, bad := range []string{"WARNING:", "XSAVE consistency", "Unhandled", "BUG:", "Call Trace"} {
		if i := strings.Index(out, bad); i >= 0 {
			t.Errorf("console has %q: %s", bad, out[max(0, i-200):min(len(out), i+300)])
		}
	}
	if t.Failed() {
		t.Logf("console:\n%s", tail(out, 20000))
	}
}
