// Package daemon tests `sandfs serve` and `sandfs mount` as built
// binaries: the tree over a real FUSE mount, the same shell session over
// `sandfs mount` on the unix socket and on TCP with the token, refusal
// without the token, clean unmount on SIGTERM, and restart on the same
// state directory.
package daemon

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/syncbuf"
	"sandfs/test/testenv"
)

// buildSandfs builds bin/sandfs into a temporary directory, or uses
// $SANDFS_BIN.
func buildSandfs(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("SANDFS_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "sandfs")
	cmd := exec.Command("go", "build", "-o", bin, "sandfs/tools/sandfs")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a started sandfs process with its stderr.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan error
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stderr: new(syncbuf.Buffer), done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit error.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit 10s after SIGTERM", p.cmd.Args[1])
		return nil
	}
}

// waitMounted polls until dir shows the tree's ctl file.
func waitMounted(t *testing.T, dir string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "ctl")); err == nil {
			return
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%v exited: %v\n%s", p.cmd.Args, err, p.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s not mounted after 15s\n%s", dir, p.stderr)
}

// mounted reports whether dir is a mount point in /proc/self/mountinfo.
func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// session is the shell transcript run, verbatim, on every view of the tree.
const session = `ls
cat ctl
echo bogus > ctl; echo "rc=$?"
cat err
echo kill > ctl; echo "rc=$?"
cat err
echo new box1 > ctl; echo "rc=$?"
cat err
ls sandboxes
cat sandboxes/nosuch/status; echo "rc=$?"
echo x > err; echo "rc=$?"
`

func runSession(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", session)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func TestServeAndMount(t *testing.T) {
	testenv.NeedFUSE(t)
	bin := buildSandfs(t)
	dir := t.TempDir()
	state, sock, mnt := filepath.Join(dir, "state"), filepath.Join(dir, "run/sandfs.sock"), filepath.Join(dir, "mnt")
	tcp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// No guest kernel: no VMM runtime, so `new` fails with ENODEV.
	serve := start(t, bin, "serve", "--state", state, "--listen", "unix:"+sock, "--listen", "tcp:"+tcp, "--mount", mnt, "--kernel", "/nonexistent")
	waitMounted(t, mnt, serve)

	tok, err := os.ReadFile(filepath.Join(state, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(state, "token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("token mode %v; want 0600", fi.Mode().Perm())
	}

	direct := runSession(t, mnt)
	t.Logf("session on the FUSE mount:\n%s", direct)
	for _, s := range []string{
		"rc=1\nctl: unknown verb \"bogus\"\n",
		"kill: missing argument",
		"new: no VMM runtime configured",
		"No such file or directory",
	} {
		if !strings.Contains(direct, s) {
			t.Errorf("session on the FUSE mount lacks %q:\n%s", s, direct)
		}
	}

	b1 := filepath.Join(dir, "b1")
	m1 := start(t, bin, "mount", b1, "--addr", "unix:"+sock)
	waitMounted(t, b1, m1)
	if got := runSession(t, b1); got != direct {
		t.Errorf("session over sandfs mount (unix) differs:\n%s\nwant:\n%s", got, direct)
	}

	b2 := filepath.Join(dir, "b2")
	m2 := start(t, bin, "mount", b2, "--addr", "tcp:"+tcp, "--token-file", filepath.Join(state, "token"))
	waitMounted(t, b2, m2)
	if got := runSession(t, b2); got != direct {
		t.Errorf("session over sandfs mount (tcp) differs:\n%s\nwant:\n%s", got, direct)
	}

	// TCP without the token, or with a wrong one: refused.
	wrong := filepath.Join(dir, "wrong-token")
	if err := os.WriteFile(wrong, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{}, {"--token-file", wrong}} {
		b3 := filepath.Join(dir, "b3")
		m3 := start(t, bin, append([]string{"mount", b3, "--addr", "tcp:" + tcp}, args...)...)
		select {
		case err := <-m3.done:
			m3.done <- err
			if err == nil || !strings.Contains(m3.stderr.String(), "operation not permitted") {
				t.Errorf("mount over tcp %v: %v\n%s; want a refusal (EPERM)", args, err, m3.stderr)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("mount over tcp %v without the token did not fail", args)
		}
	}

	// The token on the command line (visible to every user): refused
	// before dialing, even the right one.
	b5 := filepath.Join(dir, "b5")
	m5 := start(t, bin, "mount", b5, "--addr", "tcp:"+tcp, "--token", strings.TrimSpace(string(tok)))
	select {
	case err := <-m5.done:
		m5.done <- err
		if err == nil || !strings.Contains(m5.stderr.String(), "--token is refused") {
			t.Errorf("mount --token: %v\n%s; want a refusal naming --token", err, m5.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("mount --token did not fail")
	}

	// The daemon logged the failures with their text.
	if log := serve.stderr.String(); !strings.Contains(log, `unknown verb \"bogus\"`) || !strings.Contains(log, "attach refused") {
		t.Errorf("daemon log lacks the failed request or the refused attach:\n%s", log)
	}

	// A bridge whose daemon goes away unmounts itself at its next use.
	b4 := filepath.Join(dir, "b4")
	m4 := start(t, bin, "mount", b4, "--addr", "unix:"+sock)
	waitMounted(t, b4, m4)

	// SIGTERM: every mount goes away, nothing stale.
	for _, m := range []struct {
		p   *proc
		dir string
	}{{m1, b1}, {m2, b2}, {serve, mnt}} {
		if err := m.p.stop(t); err != nil {
			t.Errorf("%v exited with %v\n%s", m.p.cmd.Args, err, m.p.stderr)
		}
		if mounted(t, m.dir) {
			t.Errorf("%s still mounted after SIGTERM", m.dir)
			syscall.Unmount(m.dir, syscall.MNT_DETACH)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind: %v", sock, err)
	}
	if _, err := os.ReadDir(b4); err == nil {
		t.Errorf("readdir through a bridge to a stopped daemon succeeded")
	}
	select {
	case err := <-m4.done:
		m4.done <- err
		if err == nil {
			t.Errorf("mount with its daemon gone exited 0; want 1")
		}
	case <-time.After(10 * time.Second):
		t.Errorf("mount did not exit after its daemon went away")
	}
	if mounted(t, b4) {
		t.Errorf("%s still mounted after its daemon went away", b4)
		syscall.Unmount(b4, syscall.MNT_DETACH)
	}

	// Restart on the same state directory: the lock was released, the
	// token is kept.
	serve2 := start(t, bin, "serve", "--state", state, "--listen", "unix:"+sock, "--listen", "tcp:"+tcp, "--mount", mnt, "--kernel", "/nonexistent")
	waitMounted(t, mnt, serve2)
	if tok2, _ := os.ReadFile(filepath.Join(state, "token")); !bytes.Equal(tok, tok2) {
		t.Errorf("token changed across a restart")
	}
	// A process keeps a file of the mount open: SIGTERM still unmounts.
	holder := exec.Command("sh", "-c", "exec sleep 60 < "+filepath.Join(mnt, "ctl"))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	if err := serve2.stop(t); err != nil {
		t.Errorf("second serve: %v\n%s", err, serve2.stderr)
	}
	if mounted(t, mnt) {
		t.Errorf("%s still mounted after SIGTERM with a file open in it", mnt)
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
}
