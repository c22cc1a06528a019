package vmmproc

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
)

// TestLaunchFromSpare: a Detached launch through Spares runs its machine
// in the spare process (its launch phases say so), with the console, log
// and control socket of a new one; Stop ends it; the spare taken is
// replaced.
func TestLaunchFromSpare(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	cfg.Detached = true
	s, err := NewSpares("", false, "", 1)
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

// TestSpareCgroup: with cgroup v2 (the lab's), a spare starts in a group
// of its own under the sandboxes' parent, and the sandbox it becomes
// takes that group over, no migration: its config names the group
// (adoption and removal read it), the process is in it with the
// sandbox's limits, its launch phases say `limits=` (not `cgroup=`),
// and the group goes when the process ends. A stale empty spare group
// of an earlier launcher is removed, a busy one is not.
func TestSpareCgroup(t *testing.T) {
	testenv.NeedRoot(t)
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	cfg.Detached = true
	l, err := cgroup.Detect()
	if err != nil {
		t.Fatal(err)
	}
	testenv.HandOff(t, l.Mode == cgroup.V2, "cgroup v2 ("+l.String()+")")
	parent := "sandfs-test/s" + strconv.Itoa(os.Getpid())
	cfg.Jail.Cgroup = parent + "/t"
	t.Cleanup(func() { os.Remove(filepath.Join(l.V2, parent)) })

	// Leftovers: an empty spare group made long ago, and one with a
	// process in it.
	stale, err := l.Create(parent+"/"+spareGroupPrefix+"stale", spareLimits)
	if err != nil {
		t.Fatal(err)
	}
	stale.Close()
	old := time.Now().Add(-2 * staleAfter)
	if err := os.Chtimes(stale.Dirs[0], old, old); err != nil {
		t.Fatal(err)
	}
	busy, err := l.Create(parent+"/"+spareGroupPrefix+"busy", spareLimits)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: busy.FD()}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	busy.Close()
	t.Cleanup(func() {
		sleeper.Process.Kill()
		sleeper.Wait()
		busy.Remove()
	})
	if err := os.Chtimes(busy.Dirs[0], old, old); err != nil {
		t.Fatal(err)
	}

	s, err := NewSpares("", false, parent, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(stale.Dirs[0]); !os.IsNotExist(err) {
		t.Errorf("stale empty spare group %s still there (%v)", stale.Dirs[0], err)
	}
	if _, err := os.Stat(busy.Dirs[0]); err != nil {
		t.Errorf("spare group with a process removed: %v", err)
	}

	sp := readySpare(t, s)
	if sp.cg == nil || path.Dir(sp.cg.Name) != parent {
		t.Fatalf("spare's group %+v; want one under %s", sp.cg, parent)
	}
	group := sp.cg.Name
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := s.Launch(ctx, cfg)
	if err != nil {
		t.Fatalf("Launch: %v (log: %s)", err, readTail(cfg.LogFile))
	}
	defer p.Kill()
	if ph := p.LaunchPhases(); p.Pid() != sp.cmd.Process.Pid || !strings.Contains(ph, "limits=") || strings.Contains(ph, "cgroup=") {
		t.Errorf("launched pid %d, phases %q; want the spare's (%d), its limits written, no move", p.Pid(), ph, sp.cmd.Process.Pid)
	}
	b, err := os.ReadFile(cfg.Socket + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var saved Config
	if err := json.Unmarshal(b, &saved); err != nil || saved.Jail.Cgroup != group {
		t.Errorf("config's cgroup %q (%v); want the spare's %q", saved.Jail.Cgroup, err, group)
	}
	if cg, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cgroup"); !strings.HasSuffix(strings.TrimSpace(string(cg)), "/"+group) {
		t.Errorf("/proc/<vmm>/cgroup = %q; want %s", cg, group)
	}
	gdir := filepath.Join(l.V2, group)
	for file, v := range map[string]string{"memory.max": "268435456", "cpu.max": "100000 100000", "pids.max": "64"} {
		if got, err := os.ReadFile(filepath.Join(gdir, file)); err != nil || strings.TrimSpace(string(got)) != v {
			t.Errorf("%s = %q, %v; want %s (the sandbox's)", file, got, err, v)
		}
	}
	waitConsole(t, p, cfg, "tick 3\r\n", bootTimeout)
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if _, err := os.Stat(gdir); !os.IsNotExist(err) {
		t.Errorf("the sandbox's group %s outlived its process (%v)", gdir, err)
	}
	next := readySpare(t, s)
	if next.cg == nil || next.cg.Name == group {
		t.Fatalf("the next spare's group %+v; want a new one", next.cg)
	}
	nextPid, nextDir := next.cmd.Process.Pid, next.cg.Dirs[0]

	// A launch whose group is elsewhere gets a new process (the spare,
	// with a spare's limits, is ended), in that group.
	dir2 := t.TempDir()
	cfg2 := launchConfig(t, dir2, "ticks")
	cfg2.Detached = true
	other := "sandfs-test/o" + strconv.Itoa(os.Getpid())
	cfg2.Jail.Cgroup = other + "/t"
	t.Cleanup(func() { os.Remove(filepath.Join(l.V2, other)) })
	p2, err := s.Launch(ctx, cfg2)
	if err != nil {
		t.Fatalf("Launch elsewhere: %v (log: %s)", err, readTail(cfg2.LogFile))
	}
	defer p2.Kill()
	if ph := p2.LaunchPhases(); p2.Pid() == nextPid || strings.Contains(ph, "handoff=") || !strings.Contains(ph, "spawn=") {
		t.Errorf("launch under another parent: pid %d (the spare was %d), phases %q; want a new process", p2.Pid(), nextPid, ph)
	}
	if cg, _ := os.ReadFile("/proc/" + strconv.Itoa(p2.Pid()) + "/cgroup"); !strings.HasSuffix(strings.TrimSpace(string(cg)), "/"+cfg2.Jail.Cgroup) {
		t.Errorf("/proc/<vmm>/cgroup = %q; want %s", cg, cfg2.Jail.Cgroup)
	}
	if _, err := os.Stat(nextDir); !os.IsNotExist(err) {
		t.Errorf("the ended spare's group %s is still there (%v)", nextDir, err)
	}
	p2.Kill()
	p2.Wait()
}
