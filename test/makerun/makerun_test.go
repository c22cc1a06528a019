// Package makerun tests `make run`'s script, tools/lab/run.sh, on both of
// its paths, as a user meets it: start it, then drive sandboxes with the
// CLI and no flags (ls, new, exec, cp, kill).
package makerun

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/test/syncbuf"
	"sandfs/test/testenv"
	"sandfs/vmm/vmmproc"
)

// TestMakeRunNative: where the probe says guests run natively (a KVM host,
// or inside the lab), run.sh starts the daemon here.
func TestMakeRunNative(t *testing.T) {
	testenv.NeedGuests(t)
	drive(t, startRun(t, "native"))
}

// TestMakeRunLab: run.sh's other path, the daemon inside the lab, forced
// with SANDFS_FORCE_LAB=1 on hosts that could run natively. The lab
// cannot start a lab inside itself: there, the host stage has run this.
func TestMakeRunLab(t *testing.T) {
	if testenv.InLab() {
		t.Skip("inside the lab: the host stage of make test runs run.sh's lab path")
	}
	drive(t, startRun(t, "lab", "SANDFS_FORCE_LAB=1"))
}

// TestMakeRunLabRestart: the lab's state lives on the host's disk (its
// state image, here the test's own): a sandbox paused by make run's stop
// and its snapshot are listed again by the next make run, the sandbox
// resumes with its files, and the snapshot is a source for new.
func TestMakeRunLabRestart(t *testing.T) {
	if testenv.InLab() {
		t.Skip("inside the lab: the host stage of make test runs run.sh's lab path")
	}
	dir := runDir(t)
	r := startRunIn(t, dir, "lab", "SANDFS_FORCE_LAB=1")
	id := strings.TrimSpace(r.cli(t, "new"))
	r.waitAgent(t, id)
	r.cli(t, "exec", id, "--", "sh", "-c", "echo kept > /root/marker")
	box := filepath.Join(r.mnt, "sandboxes", id)
	if err := os.WriteFile(filepath.Join(box, "ctl"), []byte("snapshot keep1\n"), 0); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	r.stop()
	if !strings.Contains(r.log.String(), "sandbox "+id+" paused to disk") {
		t.Errorf("make run's stop did not pause %s to disk:\n%s", id, r.log.String())
	}

	r = startRunIn(t, dir, "lab", "SANDFS_FORCE_LAB=1")
	if line := lineOf(r.cli(t, "ls"), id); !strings.Contains(line, " paused ") {
		t.Fatalf("sandfs ls after the restart: %q; want %s paused", line, id)
	}
	if _, err := os.Stat(filepath.Join(r.mnt, "snapshots", "keep1")); err != nil {
		t.Errorf("snapshot keep1 after the restart: %v", err)
	}
	if err := os.WriteFile(filepath.Join(box, "ctl"), []byte("resume\n"), 0); err != nil {
		t.Fatalf("resume after the restart: %v", err)
	}
	r.waitAgent(t, id)
	if out := r.cli(t, "exec", id, "--", "cat", "/root/marker"); out != "kept\n" {
		t.Errorf("the marker after resume = %q; want kept", out)
	}
	if err := os.WriteFile(filepath.Join(r.mnt, "ctl"), []byte("new fromsnap from=keep1\n"), 0); err != nil {
		t.Fatalf("new from=keep1 after the restart: %v", err)
	}
	r.waitAgent(t, "fromsnap")
	if out := r.cli(t, "exec", "fromsnap", "--", "cat", "/root/marker"); out != "kept\n" {
		t.Errorf("the marker in a sandbox new from the snapshot = %q; want kept", out)
	}
}

type run struct {
	stop func() // stops run.sh (SIGTERM, as Ctrl-C would) and waits; idempotent
	repo string
	mnt  string   // the FUSE mount run.sh made
	env  []string // the CLI's environment: no SANDFS_ADDR or token
	log  *syncbuf.Buffer
	e2b  int // the E2B adapter's port
}

// startRun starts tools/lab/run.sh with a private mount point and state
// (runDir, startRunIn).
func startRun(t *testing.T, mode string, env ...string) *run {
	t.Helper()
	return startRunIn(t, runDir(t), mode, env...)
}

// runDir is a directory for run.sh's mount point and state (the daemon's
// state directory natively, the lab's state image otherwise) that the
// VMM, dropped to an unprivileged uid, can reach.
func runDir(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t)
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startRunIn starts tools/lab/run.sh with its mount point and state in
// dir, waits for the end of its "sandfs is up" banner and checks it took
// the expected path; r.stop, or Cleanup, stops it.
func startRunIn(t *testing.T, dir, mode string, env ...string) *run {
	t.Helper()
	repo, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bin/sandfs", "build/vmlinuz", "build/templates/base.ext4"} {
		testenv.NeedFile(t, filepath.Join(repo, f), "make build kernel template")
	}
	testenv.NeedFUSE(t)
	base := cleanEnv()
	cmd := exec.Command(filepath.Join(repo, "tools/lab/run.sh"))
	e2bPort := freePort(t)
	cmd.Env = append(append(base, "SANDFS_MOUNT="+filepath.Join(dir, "mnt"), "SANDFS_STATE="+filepath.Join(dir, "state"),
		"SANDFS_LAB_STATE="+filepath.Join(dir, "state.ext4"),
		fmt.Sprintf("SANDFS_LAB_9P_PORT=%d", freePort(t)), fmt.Sprintf("SANDFS_E2B_PORT=%d", e2bPort)), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log syncbuf.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		said := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			// The banner's last line: the key and the quick start are
			// in the log once it is read.
			if !said && strings.HasPrefix(sc.Text(), "Press Ctrl-C to stop") {
				said = true
				up <- true
			}
		}
		if !said {
			up <- false
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { stopRun(t, cmd, dir, &log) }) }
	t.Cleanup(stop)
	select {
	case ok := <-up:
		if !ok {
			t.Fatalf("run.sh exited before sandfs was up:\n%s", log.String())
		}
	case <-time.After(6 * time.Minute):
		t.Fatalf("run.sh: sandfs not up after 6m:\n%s", log.String())
	}
	want := map[string]string{"native": "== sandfs: running natively", "lab": "INSIDE THE LAB"}[mode]
	if !strings.Contains(log.String(), want) {
		t.Fatalf("run.sh did not take the %s path (want %q):\n%s", mode, want, log.String())
	}
	return &run{stop: stop, repo: repo, mnt: filepath.Join(dir, "mnt"), env: base, log: &log, e2b: e2bPort}
}

// stopRun stops run.sh (SIGTERM, as Ctrl-C would), waits for it (its
// process group is killed after 3 minutes) and ends the VMMs a native
// daemon left.
func stopRun(t *testing.T, cmd *exec.Cmd, dir string, log *syncbuf.Buffer) {
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute): // the lab's orderly stop has 2
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// Sandboxes outlive the daemon (a failed test leaves some).
	runs, _ := filepath.Glob(filepath.Join(dir, "state/run/*"))
	for _, run := range runs {
		vmmproc.EndOrphan(filepath.Join(run, "vmm.sock"))
	}
	if t.Failed() {
		t.Logf("run.sh output:\n%s", log.String())
	}
}

// checkE2B: the E2B adapter answers on the port and with the key the
// banner gives, and refuses another key.
func checkE2B(t *testing.T, r *run) {
	t.Helper()
	_, rest, ok := strings.Cut(r.log.String(), " E2B_API_KEY=")
	key, _, _ := strings.Cut(rest, "\n")
	if !ok || strings.TrimSpace(key) == "" {
		t.Fatalf("run.sh's banner gives no E2B_API_KEY:\n%s", r.log.String())
	}
	get := func(key string) int {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/v2/sandboxes", r.e2b), nil)
		req.Header.Set("X-API-KEY", key)
		// The lab's forward may accept and reset before the adapter listens.
		var resp *http.Response
		var err error
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("E2B adapter on port %d: %v", r.e2b, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(strings.TrimSpace(key)); code != http.StatusOK {
		t.Errorf("GET /v2/sandboxes with the banner's key: %d; want 200", code)
	}
	if code := get("e2b_not_the_key_0123456789abcdef"); code != http.StatusUnauthorized {
		t.Errorf("GET /v2/sandboxes with another key: %d; want 401", code)
	}
}

// drive uses the CLI with no connection flags, as the README shows, and
// the E2B adapter as the banner says.
func drive(t *testing.T, r *run) {
	checkE2B(t, r)
	id := strings.TrimSpace(r.cli(t, "new"))
	if id == "" {
		t.Fatal("sandfs new printed no id")
	}
	if out := r.cli(t, "ls"); !strings.Contains(out, id) {
		t.Errorf("sandfs ls = %q; want %s in it", out, id)
	}
	// The mount (serve --mount natively; sandfs mount over TCP on the
	// lab path) shows the same sandbox.
	if b, err := os.ReadFile(filepath.Join(r.mnt, "sandboxes", id, "status")); err != nil || !strings.HasPrefix(string(b), id+" ") {
		t.Errorf("%s/sandboxes/%s/status = %q, %v", r.mnt, id, b, err)
	}
	r.waitAgent(t, id)
	src := filepath.Join(t.TempDir(), "hello.txt")
	if err := os.WriteFile(src, []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.cli(t, "cp", src, id+":/tmp/hello.txt")
	if out := r.cli(t, "exec", id, "--", "cat", "/tmp/hello.txt"); out != "hello from the host\n" {
		t.Errorf("cat of the copied file = %q", out)
	}
	r.cli(t, "kill", id)
	if out := r.cli(t, "ls"); !strings.Contains(out, id) || strings.Contains(lineOf(out, id), "running") {
		t.Errorf("sandfs ls after kill = %q; want %s listed, not running", out, id)
	}
}

// waitAgent waits for exec in sandbox id to work: a sandbox runs before
// its guest agent answers (seconds under the lab's emulation).
func (r *run) waitAgent(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _, err := r.try("exec", id, "--", "echo", "up")
		if err == nil && out == "up\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandfs exec %s: agent not answering after 3m: %q, %v", id, out, err)
		}
		time.Sleep(time.Second)
	}
}

func (r *run) try(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.repo, "bin/sandfs"), args...)
	cmd.Env = r.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

func (r *run) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, err := r.try(args...)
	if err != nil {
		t.Fatalf("sandfs %s: %v\n%s%s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

func lineOf(text, word string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			return l
		}
	}
	return ""
}

// cleanEnv is this process's environment without the variables that
// would point the CLI somewhere or decide the path for run.sh.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "SANDFS_ADDR", "SANDFS_TOKEN", "SANDFS_TOKEN_FILE", "SANDFS_FORCE_LAB", "SANDFS_MOUNT", "SANDFS_STATE", "SANDFS_LAB_STATE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
