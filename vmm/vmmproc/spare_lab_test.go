package vmmproc

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sandfs/vmm"
)

// TestLaunchFromSpare: a Detached launch through Spares runs its machine
// in the spare process (its launch phases say so), with the console, log
// and control socket of a new one; Stop ends it; the spare taken is
// replaced.
func TestLaunchFromSpare(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	cfg.Detached = true
	s, err := NewSpares("", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sp := readySpare(t, s) // Launch takes it
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := s.Launch(ctx, cfg)
	if err != nil {
		t.Fatalf("Launch: %v (log: %s)", err, readTail(cfg.LogFile))
	}
	defer p.Kill()
	if p.Pid() != sp.cmd.Process.Pid || !strings.Contains(p.LaunchPhases(), "handoff=") {
		t.Errorf("launched pid %d, phases %q; want the spare's, %d", p.Pid(), p.LaunchPhases(), sp.cmd.Process.Pid)
	}
	waitConsole(t, p, cfg, "tick 3\r\n", bootTimeout)
	// ps shows it as any VMM: by its config.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cmdline"); err != nil || !strings.Contains(string(b), "-config\x00"+cfg.Socket+".json\x00") {
		t.Errorf("its command line = %q, %v; want -config %s.json", b, err, cfg.Socket)
	}
	if st, err := p.Status(ctx); err != nil || !strings.HasPrefix(st, "running ") {
		t.Errorf("Status = %q, %v; want running", st, err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(); r != vmm.ExitStopped || err != nil {
		t.Errorf("Wait after Stop = %v, %v; want stopped", r, err)
	}
	if l := waitLog(cfg.LogFile, "vmm: started"); !strings.Contains(l, "vmm: started") {
		t.Errorf("vmm.log has no start line from the spare:\n%s", l)
	}
	readySpare(t, s) // replaced
}
