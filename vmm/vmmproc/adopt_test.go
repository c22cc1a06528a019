package vmmproc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcStart: the start time is field 22 of /proc/<pid>/stat, counted
// after the command name, which may hold blanks and parentheses.
func TestProcStart(t *testing.T) {
	a, err := procStart(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("procStart(self) = %d, %v", a, err)
	}
	if b, err := procStart(os.Getpid()); b != a || err != nil {
		t.Errorf("procStart(self) again = %d, %v; want %d", b, err, a)
	}
	// A command name with ") " in it.
	bin := filepath.Join(t.TempDir(), "a) b (c")
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "100")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run %s: %v", bin, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if st, err := procStart(cmd.Process.Pid); err != nil || st < a {
		t.Errorf("procStart(%q) = %d, %v; want a start after ours (%d)", bin, st, err, a)
	}
}

// writeRecords leaves in dir what Launch leaves beside a socket: the
// config and an identity (id "" for none).
func writeRecords(t *testing.T, dir, id string) string {
	t.Helper()
	socket := filepath.Join(dir, "vmm.sock")
	if err := os.WriteFile(socket+".json", []byte(`{"ID":"t","MemBytes":2097152,"CPUs":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if id != "" {
		if err := os.WriteFile(socket+identitySuffix, []byte(id), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return socket
}

// TestAdoptGone: a record with no process, an exited one or a pid that
// names another process now is ErrGone, and the records are removed; an
// unreadable identity is an error that removes nothing.
func TestAdoptGone(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	self, err := identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	other := self
	other.Start--
	otherBoot := self
	otherBoot.Boot = "00000000-0000-0000-0000-000000000000"
	for name, id := range map[string]string{
		"none":       "",
		"exited":     `{"pid":` + strconv.Itoa(exited.Process.Pid) + `,"start":1,"boot":"x"}`,
		"reused":     jsonOf(t, other),
		"other boot": jsonOf(t, otherBoot),
	} {
		socket := writeRecords(t, t.TempDir(), id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := Adopt(ctx, socket)
		cancel()
		if !errors.Is(err, ErrGone) {
			t.Errorf("%s: Adopt = %v; want ErrGone", name, err)
		}
		for _, f := range []string{socket + ".json", socket + identitySuffix} {
			if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s after Adopt: %v; want removed", name, f, err)
			}
		}
	}
	socket := writeRecords(t, t.TempDir(), `{"pid":"x"}`)
	if _, err := Adopt(context.Background(), socket); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("bad identity: Adopt = %v; want an error other than ErrGone", err)
	}
	if _, err := os.Stat(socket + identitySuffix); err != nil {
		t.Errorf("bad identity removed: %v", err)
	}
}

// TestAdoptNotAnswering: a recorded process that is alive but does not
// serve the control socket is killed, not left running.
func TestAdoptNotAnswering(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	dir := t.TempDir()
	socket := writeRecords(t, dir, "")
	if err := writeIdentity(socket, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Adopt(ctx, socket)
	if err == nil || errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "adopt: pid ") {
		t.Errorf("Adopt = %v; want the control's failure", err)
	}
	if werr := cmd.Wait(); werr == nil || !strings.Contains(werr.Error(), "killed") {
		t.Errorf("process after a failed Adopt: %v; want killed", werr)
	}
}

func jsonOf(t *testing.T, id identity) string {
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAdoptZombie: a recorded process that has exited but is not reaped
// yet (a zombie: its identity still reads) is ErrGone.
func TestAdoptZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	socket := writeRecords(t, t.TempDir(), "")
	if err := writeIdentity(socket, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := Adopt(context.Background(), socket); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt of a zombie = %v; want ErrGone", err)
	}
}
