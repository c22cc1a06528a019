package vmm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seccompChild runs in a re-executed test binary: install the VMM's filter,
// exercise the Go runtime, then make a forbidden syscall.
func seccompChild() {
	if err := installSeccomp(allowedSyscalls); err != nil {
		fmt.Println("install:", err)
		os.Exit(3)
	}
	done := make(chan int)
	for i := 0; i < 4; i++ {
		go func() {
			time.Sleep(10 * time.Millisecond)
			b := make([]byte, 1<<20)
			done <- len(b)
		}()
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	f, err := os.CreateTemp("", "seccomp")
	if err == nil {
		f.Write([]byte("x"))
		f.Close()
		os.Remove(f.Name())
	}
	fmt.Println("alive")
	os.Stdout.Sync()
	unix.Syscall(unix.SYS_PTRACE, 0, 0, 0) // not allowed
	fmt.Println("survived")
	os.Exit(0)
}

func TestSeccompKillsForbiddenSyscall(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDFS_TEST_SECCOMP=1")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "alive") {
		t.Fatalf("filtered process did not run Go code: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "survived") {
		t.Fatalf("forbidden syscall did not kill the process:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v; want a signal exit", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("exit = %v; want killed by SIGSYS", ws)
	}
}

func TestSeccompFilterShape(t *testing.T) {
	f := seccompFilter([]uintptr{1, 2, 3})
	// arch check (3) + load nr + 3 jeq + kill + allow
	if len(f) != 9 {
		t.Fatalf("len = %d", len(f))
	}
	for i := 0; i < 3; i++ {
		jeq := f[4+i]
		if target := 4 + i + 1 + int(jeq.Jt); f[target].K != seccompRetAllow {
			t.Errorf("jeq %d jumps to %d (K=%#x); want the allow return", i, target, f[target].K)
		}
		if f[4+i+1+int(jeq.Jf)].K == seccompRetAllow && i == 2 {
			t.Errorf("last jeq falls through to allow")
		}
	}
}
