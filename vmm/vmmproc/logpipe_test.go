package vmmproc

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/vmm/tailbuf"
)

// waitFor polls path until it holds want, for at most 10 s.
func waitFor(t *testing.T, path, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q; want %q in it", filepath.Base(path), b, want)
		}
	}
}

// TestLogPipe: a Detached process's stderr goes through its named pipe
// to its log (all of it by the reap: waitLog); when the reader goes (the
// daemon died), a new one (ReadLog, after Adopt) gets what the process
// writes from then on, appended to the same log.
func TestLogPipe(t *testing.T) {
	dir := t.TempDir()
	sock, logPath := filepath.Join(dir, "vmm.sock"), filepath.Join(dir, "vmm.log")
	// The process writes a line, then one for each line on its stdin,
	// and lives on through a broken pipe (the VMM ignores SIGPIPE).
	cmd := exec.Command("sh", "-c", `trap "" PIPE; echo first >&2; while read x; do echo "$x" >&2; done`)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, cfg: Config{Socket: sock, Detached: true}, stderr: &tailbuf.Buffer{Max: 4096}}
	sp := &spawn{}
	if err := p.logTo(logPath, sp); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(sock + logFIFOSuffix); err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want a FIFO, 0600", sock+logFIFOSuffix, fi, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sp.close()
	defer func() { in.Close(); cmd.Wait() }()
	waitFor(t, logPath, "first\n")

	// The daemon dies: its reader goes. (Its log file stays.)
	p.logPipe.Close()
	<-p.logCopied
	p.logFile.Close()
	if err := unix.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatal(err)
	}
	// Another daemon adopts the process and reads its pipe again.
	q := &Process{cfg: Config{Socket: sock}, stderr: &tailbuf.Buffer{Max: 4096}}
	if err := q.ReadLog(logPath); err != nil {
		t.Fatalf("ReadLog = %v", err)
	}
	io.WriteString(in, "after adoption\n")
	waitFor(t, logPath, "after adoption\n")
	if got := q.stderr.String(); !strings.Contains(got, "after adoption") {
		t.Errorf("adopted process's tail = %q; want its new lines", got)
	}
	b, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(b), "first\n") {
		t.Errorf("vmm.log = %q; want the first daemon's lines kept, the new ones appended", b)
	}

	// No pipe (a VMM launched before it existed): nothing to read.
	if err := (&Process{cfg: Config{Socket: filepath.Join(dir, "old.sock")}}).ReadLog(logPath); err != nil {
		t.Errorf("ReadLog without a pipe = %v; want nil", err)
	}
}
