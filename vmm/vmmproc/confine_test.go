package vmmproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
	"sandfs/vmm/cgroup"
)

// TestLaunchEntersCgroupFirst: the VMM is in its cgroup, in every
// hierarchy of the host's layout, before it reads the kernel (and so
// before it maps guest RAM): in v2 by CLONE_INTO_CGROUP, in v1 by the
// start gate. The kernel is a FIFO, so the VMM blocks opening it; no KVM
// is needed. Its failure then ends Launch and removes the group.
func TestLaunchEntersCgroupFirst(t *testing.T) {
	testenv.NeedRoot(t)
	layout, err := cgroup.Detect()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Need(t, layout.Mode != cgroup.None, "usable cgroup controllers: "+layout.Why)
	dir := t.TempDir()
	kernel := filepath.Join(dir, "kernel")
	if err := unix.Mkfifo(kernel, 0o600); err != nil {
		t.Fatal(err)
	}
	name := "sandfs-test/e" + strconv.Itoa(os.Getpid())
	cfg := Config{ID: "e", Kernel: kernel, MemBytes: 128 << 20, CPUs: 1,
		Socket: filepath.Join(dir, "ctl.sock"), LogFile: filepath.Join(dir, "vmm.log"),
		Jail: JailConfig{Cgroup: name}}
	var dirs []string // the group's directory in each hierarchy
	if layout.Mode == cgroup.V2 {
		dirs = append(dirs, filepath.Join(layout.V2, name))
	} else {
		for _, c := range cgroup.Needed {
			dirs = append(dirs, filepath.Join(layout.V1[c], name))
		}
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			os.Remove(filepath.Dir(d))
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		p, err := Launch(ctx, cfg)
		if err == nil {
			p.Kill()
		}
		errc <- err
	}()
	// The VMM shows up in the group while it is blocked on the FIFO.
	var pid string
	for deadline := time.Now().Add(30 * time.Second); pid == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid = f[0]
		}
	}
	if pid == "" {
		t.Fatalf("no process in %s", dirs[0])
	}
	for _, d := range dirs[1:] {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if !slices.Contains(strings.Fields(string(b)), pid) {
			t.Errorf("%s/cgroup.procs = %q; want the VMM, pid %s", d, b, pid)
		}
	}
	// In v2 the child is in the group from clone on, before its execve
	// (CLONE_INTO_CGROUP): until then it shows the test's command line.
	var cmd []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cmd, _ = os.ReadFile("/proc/" + pid + "/cmdline"); strings.Contains(string(cmd), "vmm\x00-config") {
			break
		}
	}
	if !strings.Contains(string(cmd), "vmm\x00-config") {
		t.Errorf("pid %s in the group is %q; want the VMM", pid, cmd)
	}
	stack, _ := os.ReadFile("/proc/" + pid + "/wchan")
	t.Logf("VMM pid %s is in %s (%s), waiting in %s", pid, name, layout.Mode, stack)

	// An empty kernel: the VMM fails, Launch reports it and cleans up.
	for deadline := time.Now().Add(30 * time.Second); !fifoReader(t, kernel); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the VMM in %s never opened its kernel", name)
		}
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "kernel") {
		t.Errorf("Launch = %v; want the VMM's kernel error", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (%v)", d, err)
		}
	}
}

// TestStartGate: a VMM started with -gate does nothing before the gate
// (fd 6) opens (it has not reached the kernel, a FIFO nobody reads),
// proceeds once a byte arrives, and exits with an error if the gate
// closes without one; without -gate it ignores an inherited fd 6.
func TestStartGate(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "kernel")
	if err := unix.Mkfifo(kernel, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "vmm.json")
	if err := os.WriteFile(cfgPath, []byte(`{"Kernel": "`+kernel+`", "MemBytes": 134217728, "CPUs": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	readerOpen := func() bool { return fifoReader(t, kernel) }
	start := func(args ...string) (*exec.Cmd, *os.File, *strings.Builder) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		cmd := exec.Command(os.Args[0], append([]string{"vmm", "-config", cfgPath}, args...)...)
		cmd.ExtraFiles = []*os.File{nil, nil, nil, r} // fd 6
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, w, &stderr
	}

	cmd, gate, stderr := start("-gate")
	time.Sleep(300 * time.Millisecond)
	if readerOpen() {
		t.Fatal("the VMM opened its kernel before the gate opened")
	}
	gate.Write([]byte{1})
	gate.Close()
	for deadline := time.Now().Add(10 * time.Second); !readerOpen(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the VMM did not reach its kernel after the gate opened")
		}
	}
	cmd.Wait()
	if !strings.Contains(stderr.String(), "kernel") {
		t.Errorf("VMM stderr = %q; want the empty kernel's error", stderr)
	}

	cmd, gate, stderr = start("-gate")
	gate.Close()
	if err := cmd.Wait(); err == nil || !strings.Contains(stderr.String(), "start gate: closed before the cgroup was set up") {
		t.Errorf("VMM with a closed gate: %v, stderr %q; want the gate error", err, stderr)
	}
	if readerOpen() {
		t.Error("a VMM whose gate closed unopened went on to its kernel")
	}

	// No -gate: an fd 6 that happens to be open (in a real VMM, the Go
	// runtime's epoll fd; here a pipe nobody writes) is not a gate.
	cmd, gate, stderr = start()
	defer gate.Close()
	for deadline := time.Now().Add(10 * time.Second); !readerOpen(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a VMM without -gate waited on its inherited fd 6; stderr %q", stderr)
		}
	}
	cmd.Wait()
}

// fifoReader reports whether some process has the FIFO at path open for
// reading (or is blocked opening it), in which case that reader then sees
// EOF: a non-blocking open for write fails with ENXIO while there is no
// reader (fifo(7)), and otherwise is closed at once.
func fifoReader(t *testing.T, path string) bool {
	t.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return true
	}
	if err != unix.ENXIO {
		t.Fatalf("open %s: %v", path, err)
	}
	return false
}
