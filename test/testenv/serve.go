package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ServeTimeout bounds a test's `sandfs serve` from its start to its
// mounted tree: the daemon mounts after its host probe, which may run
// three test guests of up to 20 s each where one stalls (vmm/probe).
const ServeTimeout = 90 * time.Second

// WaitMounted waits up to ServeTimeout for the tree of a `sandfs serve`
// mounted at mnt (its ctl file), and reports whether it came.
func WaitMounted(mnt string) bool {
	for deadline := time.Now().Add(ServeTimeout); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(mnt, "ctl")); err == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Sh runs a shell script in dir (a daemon's mounted tree), for at most
// 90 s, and returns its stdout; its stderr is in the error.
func Sh(dir, script string) (string, error) { return ShWithin(dir, script, 90*time.Second) }

// ShWithin is Sh for at most d (a guest's build under the lab's
// emulation takes longer than a file operation). At d the script's whole
// process group is killed, not only the shell: a `cat` of a guest's
// stream left behind, blocked in a read of the tree, would keep the
// tree's file open and the test waiting on the daemon's end.
func ShWithin(dir, script string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.String(), err
}

// Running reports whether pid exists and is neither a zombie (killed,
// not yet reaped by whoever adopted it) nor dead: its state, the field
// after the command name in /proc/<pid>/stat (a name that may itself
// hold ") ", so read after the last one), is not Z or X.
func Running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	state := s[strings.LastIndex(s, ") ")+2:]
	return !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X")
}

// StatusPid is the VMM's pid in a sandbox's status line (pid=N), or 0.
func StatusPid(status string) int {
	for _, f := range strings.Fields(status) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			if pid, err := strconv.Atoi(v); err == nil && pid > 0 {
				return pid
			}
		}
	}
	return 0
}
