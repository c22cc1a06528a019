package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShWithinKillsGroup: a script whose child blocks past the limit
// returns at the limit, and the child is gone with it.
func TestShWithinKillsGroup(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pidf := filepath.Join(dir, "pid")
	_, err := ShWithin(dir, "sh -c 'echo $$ > pid; exec cat f' ; echo after", time.Second)
	if err == nil {
		t.Fatalf("a script blocked past its limit returned no error")
	}
	b, err := os.ReadFile(pidf)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); Running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the script's blocked child %d outlived it", pid)
		}
	}
}
