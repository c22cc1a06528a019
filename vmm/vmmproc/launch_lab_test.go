package vmmproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/testguest"
)

// launchConfig is a VMM process config for the test guest in dir.
func launchConfig(t *testing.T, dir, mode string) Config {
	t.Helper()
	testenv.NeedGuests(t)
	initrd := filepath.Join(dir, "initrd")
	if _, err := os.Stat(initrd); err != nil {
		if err := os.WriteFile(initrd, testguest.Initrd(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Config{
		ID: "t", Kernel: testguest.Kernel(t), Initrd: initrd, Cmdline: "quiet " + testguest.Mode + "=" + mode,
		MemBytes: 128 << 20, CPUs: 1,
		Socket: filepath.Join(dir, "ctl.sock"), Console: filepath.Join(dir, "console"),
		LogFile: filepath.Join(dir, "vmm.log"),
	}
}

func waitFile(t *testing.T, path, s string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), s) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no %q after %v:\n%s", path, s, d, tail(string(b), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitConsole is waitFile on p's console; if s does not come, p is
// paused first so that its vmm.log says where each vCPU was (vcpu:
// paused, rip, rflags, exits), and the log's tail goes with the failure.
func waitConsole(t *testing.T, p *Process, cfg Config, s string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(cfg.Console)
		if strings.Contains(string(b), s) {
			return string(b)
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			perr := p.Pause(ctx)
			cancel()
			l, _ := os.ReadFile(cfg.LogFile)
			t.Fatalf("%s has no %q after %v:\n%s\npause: %v; vmm.log:\n%s", cfg.Console, s, d, tail(string(b), 2000), perr, tail(string(l), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits up to 10 s for vmm.log at path to hold each of want and returns
// it: the VMM's stderr reaches the file through a pipe the launcher
// copies (logpipe.go), so a line can come after the request that made
// it has returned (a CI run read an empty vmm.log right after a pause).
func waitLog(path string, want ...string) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, _ := os.ReadFile(path)
		all := true
		for _, w := range want {
			all = all && strings.Contains(string(l), w)
		}
		if all || time.Now().After(deadline) {
			return string(l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLaunchPauseResumeStop(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitConsole(t, p, cfg, "tick 2\r\n", bootTimeout)
	if err := p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if l := waitLog(cfg.LogFile, "vcpu: paused"); !strings.Contains(l, "vcpu: paused") {
		t.Errorf("vmm.log has no vcpu: paused line after a pause:\n%s", tail(l, 2000))
	}
	if st, err := p.Status(ctx); err != nil || !strings.HasPrefix(st, "paused ") {
		t.Errorf("Status = %q, %v; want paused", st, err)
	}
	snap := filepath.Join(dir, "snap")
	if err := p.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.request(ctx, "bogus"); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), `unknown verb "bogus"`) {
		t.Errorf("bogus verb: %v", err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(); r != vmm.ExitStopped || err != nil {
		t.Errorf("Wait = %v, %v; want stopped, nil", r, err)
	}

	// Restore the snapshot in a new process: ticks continue, no reboot.
	b, _ := os.ReadFile(cfg.Console)
	before := countTicks(string(b))
	cfg2 := cfg
	cfg2.Restore = snap
	cfg2.Console = filepath.Join(dir, "console2")
	p2, err := Launch(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Kill()
	out := waitFile(t, cfg2.Console, "tick ", 30*time.Second)
	if strings.Contains(out, "SANDFS-GUEST-INIT") || strings.Contains(out, "tick 0\r\n") {
		t.Errorf("restored guest rebooted: %q", tail(out, 300))
	}
	_ = before
	p2.Stop(ctx)
}

func TestLaunchGuestReset(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "reboot")
	cfg.Cmdline = "printk.time=1 " + testguest.Mode + "=reboot"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		p.Kill()
		t.Fatal("guest reboot did not end the VMM")
	}
	if r, err := p.Wait(); r != vmm.ExitReset || err != nil {
		t.Errorf("Wait = %v, %v; want reset, nil", r, err)
	}
	b, _ := os.ReadFile(cfg.Console)
	t.Logf("console:\n%s", tail(string(b), 12000))
}

func TestLaunchSeccompKill(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	cfg.Jail.Seccomp = true
	cfg.TestHooks = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if _, err := p.Status(ctx); err != nil {
		t.Fatalf("confined VMM does not answer status: %v", err)
	}
	err = p.request(ctx, "x-syscall 101") // ptrace
	if err == nil {
		t.Fatalf("forbidden syscall returned")
	}
	<-p.Done()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "seccomp") {
		t.Errorf("Err = %v; want a seccomp kill", err)
	}
	if !errors.Is(p.Pause(ctx), vmm.ErrEnded) {
		t.Errorf("Pause after death: want ErrEnded")
	}
}

// TestLaunchConfined launches a fully confined VMM: PID 1 of its own
// namespace, in its own network namespace, with an empty environment, in
// its jail (its / shows only the mount points of jailMounts), its own
// uid, seccomp, and the cgroup the host's layout offers (cgroup2 in the
// lab, cgroup1 on hybrid or v1 hosts; none only outside the lab), whose
// limits are set and whose memory counter grows with guest RAM; nothing is
// left after Stop.
func TestLaunchConfined(t *testing.T) {
	testenv.Need(t, os.Getuid() == 0, "needs root for namespaces and cgroups")
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	uid := testAttackerUID
	for _, d := range []string{"root", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(dir, "work"), uid, uid); err != nil {
		t.Fatal(err)
	}
	layout, err := cgroup.Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup layout: %s", layout)
	if testenv.InLab() && layout.Mode != cgroup.V2 {
		t.Fatalf("the lab mounts cgroup2 with every controller delegated; detected %s", layout)
	}
	cfg.Jail = JailConfig{Namespaces: true, Seccomp: true, UID: uid, GID: uid,
		Root: filepath.Join(dir, "root"), Work: filepath.Join(dir, "work")}
	if layout.Mode != cgroup.None {
		cfg.Jail.Cgroup = "sandfs-test/t" + strconv.Itoa(os.Getpid())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Limits() != layout.Mode {
		t.Errorf("Limits() = %s; want %s", p.Limits(), layout.Mode)
	}
	st, err := p.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st, " pid=1") {
		t.Errorf("status %q: VMM is not PID 1 of its own PID namespace", st)
	}
	pid := strconv.Itoa(p.Pid())
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	if !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", uid, uid, uid, uid)) ||
		!strings.Contains(string(status), "Seccomp:\t2") {
		t.Errorf("/proc/pid/status: uid or seccomp not applied:\n%s", status)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if g, ok := strings.CutPrefix(l, "Groups:"); ok && strings.TrimSpace(g) != "" {
			t.Errorf("the VMM keeps supplementary groups: %q", l)
		}
	}
	if env, err := os.ReadFile("/proc/" + pid + "/environ"); err != nil || len(env) != 0 {
		t.Errorf("the VMM's environment: %q, %v; want it empty", env, err)
	}
	ours, _ := os.Readlink("/proc/self/ns/net")
	if theirs, err := os.Readlink("/proc/" + pid + "/ns/net"); err != nil || theirs == ours {
		t.Errorf("the VMM's network namespace is %q (%v); want its own, not %q", theirs, err, ours)
	}
	// Its root: the mount points of its jail, nothing of the host's.
	ents, err := os.ReadDir("/proc/" + pid + "/root")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{strings.Split(dir, "/")[1], "dev"}; !equalSets(names, want) {
		t.Errorf("the VMM's / holds %q; want %q", names, want)
	}
	if ents, _ := os.ReadDir("/proc/" + pid + "/root/dev"); len(ents) != 1 {
		t.Errorf("the VMM's /dev holds %v; want only the (unmounted) kvm mount point", ents)
	}

	// The group's directories: one in v2, one per controller in v1.
	dirs := map[string]string{} // controller → directory
	for _, c := range cgroup.Needed {
		switch layout.Mode {
		case cgroup.V2:
			dirs[c] = filepath.Join(layout.V2, cfg.Jail.Cgroup)
		case cgroup.V1:
			dirs[c] = filepath.Join(layout.V1[c], cfg.Jail.Cgroup)
		}
	}
	if layout.Mode != cgroup.None {
		// /proc/<pid>/cgroup, "hierarchy-ID:controller-list:path"
		// (cgroups(7)): v2 is "0::path", v1 one line per hierarchy.
		cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		in := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.HasSuffix(f[2], "/"+cfg.Jail.Cgroup) {
				for _, c := range strings.Split(f[1], ",") {
					in[c] = true
				}
			}
		}
		want := []string{""}
		if layout.Mode == cgroup.V1 {
			want = cgroup.Needed
		}
		for _, c := range want {
			if !in[c] {
				t.Errorf("/proc/<vmm>/cgroup has no %q line for %s:\n%s", c, cfg.Jail.Cgroup, cg)
			}
		}
		// Limits as cgroupLimits computes them for 128 MiB and 1 vCPU.
		limit := map[cgroup.Mode]map[string]string{
			cgroup.V2: {"memory.max": "268435456", "cpu.max": "100000 100000", "pids.max": "64"},
			cgroup.V1: {"memory.limit_in_bytes": "268435456", "cpu.cfs_quota_us": "100000", "pids.max": "64"},
		}[layout.Mode]
		for file, v := range limit {
			got, err := os.ReadFile(filepath.Join(dirs[strings.Split(file, ".")[0]], file))
			if err != nil || strings.TrimSpace(string(got)) != v {
				t.Errorf("%s = %q, %v; want %s", file, got, err, v)
			}
		}
		// The guest's RAM is charged to the group: the process was in it
		// before it mapped RAM (v1: the start gate; v2: CLONE_INTO_CGROUP).
		waitFile(t, cfg.Console, "SANDFS-GUEST-INIT", bootTimeout)
		usage := map[cgroup.Mode]string{cgroup.V2: "memory.current", cgroup.V1: "memory.usage_in_bytes"}[layout.Mode]
		b, err := os.ReadFile(filepath.Join(dirs["memory"], usage))
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n < 8<<20 {
			t.Errorf("%s = %q, %v; want the booted guest's RAM (at least 8 MiB)", usage, b, err)
		}
		t.Logf("%s of the booted guest: %d MiB", usage, n>>20)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (%v)", d, err)
		}
		os.Remove(filepath.Dir(d)) // sandfs-test, unless another run uses it
	}
}

// TestLaunchNoLeaks runs 20 create/kill cycles and checks that no process
// or file descriptor is left behind.
func TestLaunchNoLeaks(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fds0 := countFDs(t)
	for i := 0; i < 20; i++ {
		p, err := Launch(ctx, cfg)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		pid := p.Pid()
		if i%2 == 0 {
			p.Kill()
		} else if err := p.Stop(ctx); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Fatalf("cycle %d: pid %d still exists", i, pid)
		}
	}
	if fds := countFDs(t); fds > fds0 {
		t.Errorf("fds: %d before, %d after 20 cycles", fds0, fds)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("children left: %v", kids)
	}
	if _, err := os.Stat(cfg.Socket); err == nil {
		t.Errorf("control socket left behind")
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func children(t *testing.T) []string {
	b, _ := os.ReadFile("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children")
	var out []string
	for _, task := range mustTasks() {
		c, _ := os.ReadFile("/proc/self/task/" + task + "/children")
		out = append(out, strings.Fields(string(c))...)
	}
	_ = b
	return out
}

func mustTasks() []string {
	ents, _ := os.ReadDir("/proc/self/task")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// orphanSpec is what orphanParent launches: the config with its client
// side (not in Config's JSON).
type orphanSpec struct {
	Config
	Socket, Console, LogFile string
	Detached                 bool
}

// orphanParent runs in a re-executed test binary: launch a VMM from the
// JSON orphanSpec, print its pid, and wait to be killed.
func orphanParent(specJSON string) {
	var spec orphanSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Println("bad config:", err)
		os.Exit(3)
	}
	cfg := spec.Config
	cfg.Socket, cfg.Console, cfg.LogFile, cfg.Detached = spec.Socket, spec.Console, spec.LogFile, spec.Detached
	os.Unsetenv("SANDFS_TEST_ORPHAN") // the VMM child is this binary too
	p, err := Launch(context.Background(), cfg)
	if err != nil {
		fmt.Println("launch:", err)
		os.Exit(3)
	}
	fmt.Printf("vmm-pid %d\n", p.Pid())
	select {}
}

// TestLaunchNoOrphan kills the VMM's parent with SIGKILL (no cleanup runs)
// and checks that the VMM dies with it.
func TestLaunchNoOrphan(t *testing.T) {
	dir := t.TempDir()
	pid := launchOrphan(t, launchConfig(t, dir, "forever"), false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Gone, or a zombie (reparented to init, which may not reap it).
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("VMM %d outlived its killed parent: %s", pid, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// launchOrphan launches a VMM for cfg (Detached if detached) from a
// helper process, kills the helper with SIGKILL (no cleanup runs) and
// returns the VMM's pid.
func launchOrphan(t *testing.T, cfg Config, detached bool) int {
	t.Helper()
	b, _ := json.Marshal(orphanSpec{Config: cfg, Socket: cfg.Socket, Console: cfg.Console, LogFile: cfg.LogFile, Detached: detached})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDFS_TEST_ORPHAN="+string(b))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscanf(bufio.NewReader(out), "vmm-pid %d\n", &pid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("helper did not launch a VMM: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	return pid
}

// TestLaunchStopTimeout: a VMM that does not answer (stopped with SIGSTOP)
// is killed when Stop's deadline passes.
func TestLaunchStopTimeout(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	syscall.Kill(p.Pid(), syscall.SIGSTOP)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	start := time.Now()
	p.Stop(sctx)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %v", d)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the process ended")
	}
	if r, err := p.Wait(); r != vmm.ExitError || err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Wait = %v, %v; want a kill", r, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(p.Pid())); err == nil {
		t.Errorf("pid %d still exists", p.Pid())
	}
}

// equalSets reports whether a and b hold the same strings.
func equalSets(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}
