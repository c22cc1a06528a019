package vmmproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm"
)

// TestAdoptDetached: a Detached VMM outlives its parent (killed with
// SIGKILL); Adopt finds it from its socket, and the adopted Process
// drives it (status, pause, resume) and sees its end after Stop, which
// removes its socket and records. Adopting it again is ErrGone.
func TestAdoptDetached(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "ticks")
	pid := launchOrphan(t, cfg, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Adopt(ctx, cfg.Socket)
	if err != nil {
		t.Fatalf("Adopt: %v (log: %s)", err, readTail(cfg.LogFile))
	}
	defer p.Kill()
	// Its stderr to vmm.log again, as the daemon does: a guest reset
	// logged from here on (a lab fault) is then in the failure's output,
	// which is how the lab's runner tells it from a test's failure.
	if err := p.ReadLog(cfg.LogFile); err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	if p.Pid() != pid {
		t.Errorf("adopted pid %d; the parent launched %d", p.Pid(), pid)
	}
	// The guest goes on ticking with its parent gone.
	waitConsole(t, p, cfg, "tick 3\r\n", bootTimeout)
	if err := p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Status(ctx); err != nil || !strings.HasPrefix(st, "paused ") {
		t.Errorf("Status after Pause = %q, %v; want paused", st, err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(); r != vmm.ExitStopped || err != nil {
		t.Errorf("Wait after Stop = %v, %v; want stopped", r, err)
	}
	if running(pid) {
		t.Errorf("pid %d still runs after Stop", pid)
	}
	for _, f := range []string{cfg.Socket, cfg.Socket + ".json", cfg.Socket + identitySuffix} {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the end: %v; want removed", f, err)
		}
	}
	if _, err := Adopt(ctx, cfg.Socket); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt after the end = %v; want ErrGone", err)
	}
}

// TestEndOrphan: EndOrphan stops a Detached VMM whose parent is gone and
// removes its records; a second call finds nothing.
func TestEndOrphan(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	pid := launchOrphan(t, cfg, true)
	found, err := EndOrphan(cfg.Socket)
	if err != nil || !found {
		t.Fatalf("EndOrphan = %v, %v; want found", found, err)
	}
	if running(pid) {
		t.Errorf("pid %d runs after EndOrphan", pid)
	}
	if _, err := os.Lstat(cfg.Socket + identitySuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("identity after EndOrphan: %v; want removed", err)
	}
	if found, err := EndOrphan(cfg.Socket); found || err != nil {
		t.Errorf("second EndOrphan = %v, %v; want nothing found", found, err)
	}
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func readTail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), 2000)
}

// TestLaunchClosesStrays: a descriptor of the launcher without
// close-on-exec (as go-fuse leaves /dev/fuse) is not held by the VMM: a
// Detached VMM would keep it open past the daemon's end.
func TestLaunchClosesStrays(t *testing.T) {
	dir := t.TempDir()
	cfg := launchConfig(t, dir, "forever")
	stray := filepath.Join(dir, "stray")
	fd, err := syscall.Open(stray, syscall.O_CREAT|syscall.O_RDWR, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	fds, err := filepath.Glob("/proc/" + strconv.Itoa(p.Pid()) + "/fd/*")
	if err != nil || len(fds) == 0 {
		t.Fatalf("the VMM's descriptors: %v, %v", fds, err)
	}
	for _, f := range fds {
		if target, _ := os.Readlink(f); target == stray {
			t.Errorf("the VMM holds the launcher's stray descriptor as %s", filepath.Base(f))
		}
	}
}
