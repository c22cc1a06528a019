package ctlfs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/fs/ctlfs"

	"sandfs/ctl"
	"sandfs/fs/client"
	"sandfs/guest"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// testAgent is a real guest agent (guest.Server) in a helper process
// (this test binary, TestHelperAgent) behind a hybrid-vsock style unix
// socket: a dialer sends "CONNECT 564\n", gets "OK 1\n", then speaks 9P.
// A process of its own because the agent reaps every child of its
// process (guest/reaper.go), which would steal this test's exec.Cmd
// statuses. Its commands run on this host; its fs/ is a temporary
// directory. kill is SIGKILL (the agent dies), setHung SIGSTOP/SIGCONT.
type testAgent struct {
	sock string
	root string
	cmd  *exec.Cmd
}

func newTestAgent(t testing.TB, dir string) *testAgent {
	a := &testAgent{sock: filepath.Join(dir, "vsock.sock"), root: t.TempDir()}
	a.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperAgent$")
	a.cmd.Env = append(os.Environ(), "SANDFS_TEST_AGENT="+a.sock, "SANDFS_TEST_AGENT_ROOT="+a.root)
	a.cmd.Stderr = os.Stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		a.cmd.Process.Signal(syscall.SIGCONT)
		a.cmd.Wait()
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(a.sock); err == nil {
			break
		}
		if i == 500 {
			t.Fatalf("agent helper did not listen on %s", a.sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a
}

// kill kills the agent: its connections end, new ones are refused.
func (a *testAgent) kill() { a.cmd.Process.Kill() }

// setHung stops the agent's process (SIGSTOP) or lets it go on. A stop
// is waited for: kill(2) returns before the process has taken the
// signal, and an agent still running for a moment on a loaded host
// answered the request meant to find it hung (a CI run of 2026-12-06).
func (a *testAgent) setHung(t testing.TB, h bool) {
	if !h {
		a.cmd.Process.Signal(syscall.SIGCONT)
		return
	}
	a.cmd.Process.Signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if a.stopped(t) {
			return
		}
	}
	t.Fatalf("agent (pid %d) not stopped 10s after SIGSTOP", a.cmd.Process.Pid)
}

// stopped reports whether every thread of the agent's process is
// stopped ("pid (comm) T ..." in its stat: the state follows the last ')').
func (a *testAgent) stopped(t testing.TB) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", a.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("agent's threads: %v (%d)", err, len(tasks))
	}
	for _, stat := range tasks {
		b, err := os.ReadFile(stat)
		if err != nil {
			return false // a thread that has just ended
		}
		if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// TestHelperAgent is the agent process of testAgent; it does nothing in
// an ordinary test run.
func TestHelperAgent(t *testing.T) {
	sock := os.Getenv("SANDFS_TEST_AGENT")
	if sock == "" {
		return
	}
	srv := guest.NewServer(os.Getenv("SANDFS_TEST_AGENT_ROOT"), guest.Options{Logf: func(string, ...any) {}})
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			var line []byte
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					c.Close()
					return
				}
				if b[0] == '\n' {
					break
				}
				line = append(line, b[0])
			}
			if string(line) != fmt.Sprintf("CONNECT %d", hybrid.AgentPort) {
				c.Close()
				return
			}
			io.WriteString(c, "OK 1\n")
			srv.ServeConn(c)
		}()
	}
}

// agentRuntime starts machines that each have a testAgent and a console
// log in the sandbox's directory.
type agentRuntime struct {
	t      testing.TB
	mu     sync.Mutex
	agents map[string]*testAgent
}

func (r *agentRuntime) Start(ctx context.Context, s ctl.Spec) (ctl.Machine, error) {
	a := newTestAgent(r.t, s.Dir)
	console := filepath.Join(s.Dir, "console")
	if err := os.WriteFile(console, []byte("[    0.000000] Linux version 6.1.0-test\nsandfs-init: serving 9P on vsock port 564\n"), 0o644); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.agents[s.ID] = a
	r.mu.Unlock()
	return &agentMachine{fakeMachine: newFakeMachine(), a: a, console: console}, nil
}

// Restore implements ctl.SnapshotRestorer: a machine as Start makes.
func (r *agentRuntime) Restore(ctx context.Context, s ctl.Spec, from ctl.SnapshotRef) (ctl.Machine, error) {
	return r.Start(ctx, s)
}

func (r *agentRuntime) agent(id string) *testAgent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agents[id]
}

type agentMachine struct {
	*fakeMachine
	a       *testAgent
	console string
}

var (
	_ ctl.GuestDialer   = (*agentMachine)(nil)
	_ ctl.ConsolePather = (*agentMachine)(nil)
)

func (m *agentMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	return hybrid.Dial(ctx, m.a.sock, port)
}

func (m *agentMachine) ConsolePath() string { return m.console }

// guestEnv is a tree whose sandboxes have real guest agents, reachable
// in-process, over 9P (addr) and, when FUSE works, at mnt.
type guestEnv struct {
	rt    *agentRuntime
	plane *ctl.Plane
	tree  *ctlfs.Tree
	addr  string
	mnt   string
}

func newGuestEnv(t *testing.T, fuse bool) *guestEnv {
	rt := &agentRuntime{t: t, agents: map[string]*testAgent{}}
	p, err := ctl.Open(t.TempDir(), rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &guestEnv{rt: rt, plane: p, tree: ctlfs.New(p, nil)}
	// Cleanups run last-first: unmount and stop 9P before closing the plane.
	t.Cleanup(func() { p.Close() })
	e.addr = serve9P(t, e.tree.Root(), "unix", "")
	if fuse {
		e.mnt = mountFUSE(t, e.tree.Root()).dir
	}
	return e
}

func (e *guestEnv) newSandbox(t *testing.T, id string) *testAgent {
	t.Helper()
	if _, err := e.plane.Ctl(context.Background(), []byte("new "+id)); err != nil {
		t.Fatalf("new %s: %v", id, err)
	}
	return e.rt.agent(id)
}

func (e *guestEnv) client(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, e.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sh runs a shell script in dir with a timeout and returns its output.
// The script changes to dir itself: a child forked with cmd.Dir inside
// this process's own FUSE mount would chdir there between fork and exec,
// holding syscall.ForkLock, while the agent in this process needs it to
// start the command the mount is waiting for: a deadlock.
func sh(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "cd '"+dir+"' && "+script)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func mustSh(t *testing.T, dir, script string) string {
	t.Helper()
	out, err := sh(t, dir, script)
	if err != nil {
		t.Fatalf("sh %q: %v\n%s", script, err, out)
	}
	return out
}

// TestExecFile covers exec through a FUSE mount with plain shell: both
// forms, stderr joined in order, execstatus, 10 MB intact, 8 concurrent
// one-fd execs, console, and a command that does not exist.
func TestExecFile(t *testing.T) {
	e := newGuestEnv(t, true)
	e.newSandbox(t, "t")
	sb := filepath.Join(e.mnt, "sandboxes/t")

	t.Run("one fd", func(t *testing.T) {
		got := mustSh(t, sb, `exec 3<>exec; echo 'echo out1; echo err1 >&2; echo out2; exit 3' >&3; cat <&3`)
		if got != "out1\nerr1\nout2\n" {
			t.Errorf("output = %q; want out1 err1 out2 in order", got)
		}
		st := mustSh(t, sb, `cat execstatus`)
		if !strings.Contains(st, " exited code=3 ") {
			t.Errorf("execstatus = %q; want exited code=3", st)
		}
	})
	t.Run("two commands", func(t *testing.T) {
		got := mustSh(t, sb, `echo 'sleep 0.2; printf "a b\nc"' > exec; cat exec; echo; cat execstatus`)
		if !strings.HasPrefix(got, "a b\nc\n") || !strings.Contains(got, " exited code=0 ") {
			t.Errorf("output = %q", got)
		}
		// The output is a stream: a second cat gets nothing.
		if got := mustSh(t, sb, `cat exec`); got != "" {
			t.Errorf("second cat = %q; want empty", got)
		}
	})
	t.Run("10 MB", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "src")
		data := make([]byte, 10<<20)
		rand.Read(data)
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "dst")
		mustSh(t, sb, fmt.Sprintf(`echo 'cat %s' > exec; cat exec > %s`, src, dst))
		got, _ := os.ReadFile(dst)
		if sha256.Sum256(got) != sha256.Sum256(data) {
			t.Errorf("10 MB through exec: got %d bytes, sha256 differs", len(got))
		}
	})
	t.Run("8 concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := strings.Repeat(fmt.Sprintf("line %d\n", i), 1000)
				got, err := sh(t, sb, fmt.Sprintf(`exec 3<>exec; echo 'i=0; while [ $i -lt 1000 ]; do echo "line %d"; i=$((i+1)); done' >&3; cat <&3`, i))
				if err != nil || got != want {
					t.Errorf("exec %d: %d bytes, err %v; want %d bytes", i, len(got), err, len(want))
				}
			}()
		}
		wg.Wait()
	})
	t.Run("no such command", func(t *testing.T) {
		got := mustSh(t, sb, `echo 'nosuchcmd-xyz' > exec; cat exec; cat execstatus`)
		if !strings.Contains(got, "not found") || !strings.Contains(got, "exited code=127") {
			t.Errorf("output = %q; want the shell's not found and code=127", got)
		}
	})
	t.Run("empty command", func(t *testing.T) {
		out, err := sh(t, sb, `echo > exec`)
		if err == nil {
			t.Errorf("echo > exec succeeded: %q", out)
		}
		if got := mustSh(t, sb, `cat err`); got != "exec: empty command\n" {
			t.Errorf("err = %q", got)
		}
	})
	t.Run("console", func(t *testing.T) {
		got := mustSh(t, sb, `cat console`)
		if !strings.Contains(got, "Linux version") {
			t.Errorf("console = %q", got)
		}
		if _, err := sh(t, sb, `echo x > console`); err == nil {
			t.Errorf("console is writable")
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		mustSh(t, sb, `echo 'sleep 30' > exec`)
		catInterrupted(t, filepath.Join(sb, "exec"))
		n := strings.Fields(mustSh(t, sb, "cat execstatus"))[0]
		catInterrupted(t, filepath.Join(sb, "procs", n, "wait"))
		catInterrupted(t, filepath.Join(sb, "procs", n, "stdout"))
		mustSh(t, sb, "echo signal KILL > procs/"+n+"/ctl")
		if got := mustSh(t, sb, "cat procs/"+n+"/wait"); !strings.Contains(got, "killed signal=9") {
			t.Errorf("wait after kill = %q", got)
		}
	})
}

// TestFSBind writes and reads files in the guest's fs/ through FUSE and
// through the 9P client (sandfs cp's path).
func TestFSBind(t *testing.T) {
	e := newGuestEnv(t, true)
	a := e.newSandbox(t, "t")
	all := make([]byte, 256*16)
	for i := range all {
		all[i] = byte(i)
	}
	fsDir := filepath.Join(e.mnt, "sandboxes/t/fs")

	// FUSE: create, write, read back, truncate, mkdir, rm.
	if err := os.WriteFile(filepath.Join(fsDir, "bytes"), all, 0o640); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.root, "bytes")); !bytes.Equal(got, all) {
		t.Errorf("guest file after FUSE write: %d bytes, differs", len(got))
	}
	if got, err := os.ReadFile(filepath.Join(fsDir, "bytes")); err != nil || !bytes.Equal(got, all) {
		t.Errorf("FUSE read back: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(fsDir, "bytes"), []byte("short"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.root, "bytes")); string(got) != "short" {
		t.Errorf("after overwrite: %q; want short (truncated)", got)
	}
	if fi, err := os.Stat(filepath.Join(a.root, "bytes")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, %v; want 0640", fi.Mode(), err)
	}
	if err := os.Mkdir(filepath.Join(fsDir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(a.root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fsDir, "link", "f"), []byte("via link"), 0o644); err != nil {
		t.Errorf("write through a symlinked dir: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.root, "d", "f")); string(got) != "via link" {
		t.Errorf("d/f = %q", got)
	}
	if err := os.Remove(filepath.Join(fsDir, "d", "f")); err != nil {
		t.Error(err)
	}
	if err := os.Remove(filepath.Join(fsDir, "d")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(fsDir, "nosuch")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat fs/nosuch = %v; want ENOENT", err)
	}
	// Renames: the file and a directory's file answer at their new names
	// at once (the FUSE inodes' remote nodes follow the rename).
	if err := os.MkdirAll(filepath.Join(fsDir, "m/n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fsDir, "m/n/f"), []byte("deep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mv := range [][2]string{{"bytes", "bytes2"}, {"m", "m2"}} {
		if err := os.Rename(filepath.Join(fsDir, mv[0]), filepath.Join(fsDir, mv[1])); err != nil {
			t.Fatal(err)
		}
	}
	for f, want := range map[string]string{"bytes2": "short", "m2/n/f": "deep"} {
		if got, err := os.ReadFile(filepath.Join(fsDir, f)); err != nil || string(got) != want {
			t.Errorf("fs/%s after the renames = %q, %v; want %q", f, got, err, want)
		}
	}
	// A symbolic link renamed: the directory it names stays where it is.
	if err := os.Mkdir(filepath.Join(fsDir, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("t", filepath.Join(a.root, "tl")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fsDir, "tl")); err != nil { // the kernel knows tl's inode: t's node
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(fsDir, "tl"), filepath.Join(fsDir, "tl2")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fsDir, "tl2", "g"), []byte("via the renamed link"), 0o644); err != nil {
		t.Errorf("write through the renamed link: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.root, "t", "g")); string(got) != "via the renamed link" {
		t.Errorf("t/g = %q", got)
	}

	// 9P client (sandfs cp): all 256 values both ways.
	c := e.client(t)
	if _, err := c.CopyTo(bytes.NewReader(all), client.Remote{ID: "t", Path: "/p9bytes"}, "", 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(a.root, "p9bytes")); !bytes.Equal(got, all) {
		t.Errorf("guest file after 9P copy: %d bytes, differs", len(got))
	}
	var back bytes.Buffer
	if _, err := c.CopyFrom(client.Remote{ID: "t", Path: "/p9bytes"}, &back); err != nil || !bytes.Equal(back.Bytes(), all) {
		t.Errorf("9P copy back: %d bytes, %v", back.Len(), err)
	}
	_, err := c.CopyFrom(client.Remote{ID: "t", Path: "/nosuch"}, io.Discard)
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("copy from nosuch = %v; want ENOENT", err)
	}
}

// TestClientExec is `sandfs exec` over 9P, without FUSE: separate
// streams, stdin, exit codes, start errors with their text.
func TestClientExec(t *testing.T) {
	e := newGuestEnv(t, false)
	e.newSandbox(t, "t")
	c := e.client(t)
	run := func(stdin string, argv ...string) (string, string, client.Status, error) {
		var out, errb bytes.Buffer
		o := client.ExecOptions{Argv: argv, Stdout: &out, Stderr: &errb}
		if stdin != "" {
			o.Stdin = strings.NewReader(stdin)
		}
		st, err := c.Exec(context.Background(), "t", o)
		return out.String(), errb.String(), st, err
	}
	out, errs, st, err := run("", "sh", "-c", "echo to-out; echo to-err >&2; exit 3")
	if err != nil || out != "to-out\n" || errs != "to-err\n" || st.ExitCode() != 3 {
		t.Errorf("exec = %q, %q, %+v, %v; want separate streams and code 3", out, errs, st, err)
	}
	in := strings.Repeat("ping\x00\xff\n", 10000)
	out, _, st, err = run(in, "cat")
	if err != nil || out != in || st.ExitCode() != 0 {
		t.Errorf("stdin round trip: %d bytes back of %d, %+v, %v", len(out), len(in), st, err)
	}
	_, _, st, err = run("", "sh", "-c", "kill -9 $$")
	if err != nil || st.ExitCode() != 128+9 {
		t.Errorf("killed: %+v, %v; want 137", st, err)
	}
	_, _, _, err = run("", "nosuchcmd-xyz")
	var se *client.StartError
	if !errors.As(err, &se) || se.Err.Errno != syscall.ENOENT || !strings.Contains(se.Err.Text, "not found") {
		t.Errorf("no such command: %v; want StartError ENOENT with text", err)
	}
	_, err = c.Exec(context.Background(), "t", client.ExecOptions{Argv: []string{"true"}, Cwd: "/nonexistent-dir"})
	if !errors.As(err, &se) || se.Err.Errno != syscall.ENOENT || !strings.Contains(se.Err.Text, "cwd") {
		t.Errorf("no such cwd: %v; want StartError ENOENT naming the cwd", err)
	}
	b, _ := c.ReadFile("sandboxes/t/err")
	if !strings.Contains(string(b), "procs/") || !strings.Contains(string(b), "cwd") {
		t.Errorf("sandboxes/t/err = %q; want the agent's text", b)
	}
	// A context that ends first: Exec returns its error at once and the
	// process is killed.
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	start := time.Now()
	_, err = c.Exec(ctx, "t", client.ExecOptions{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"}})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("exec past its context's deadline: %v after %v; want DeadlineExceeded at once", err, time.Since(start))
	}
	pb, _ := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(pb)))
	if perr != nil {
		t.Fatalf("the command's pid file: %q", pb)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) still runs 10s after its exec's context ended", pid)
		}
	}
	if _, err := c.Exec(ctx, "t", client.ExecOptions{Argv: []string{"true"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec with an ended context: %v; want its error before anything starts", err)
	}
	// ls, kill through the same client.
	lines, err := c.List()
	if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "t running ") {
		t.Errorf("List = %q, %v", lines, err)
	}
	if err := c.Kill("t"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := run("", "true"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("exec in a dead sandbox: %v; want EBUSY", err)
	}
}

// TestAgentFailures: an agent killed mid-command gives an error and a
// text in err; a hung agent times out without blocking anything else.
func TestAgentFailures(t *testing.T) {
	d, o := ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout
	t.Cleanup(func() { ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout = d, o }) // after the env's cleanups
	ctlfs.GuestDialTimeout, ctlfs.GuestOpTimeout = 500*time.Millisecond, 500*time.Millisecond
	e := newGuestEnv(t, true)
	a := e.newSandbox(t, "k")
	h := e.newSandbox(t, "h")
	e.newSandbox(t, "ok")
	c := e.client(t)

	t.Run("killed mid-command", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), "k", client.ExecOptions{Argv: []string{"sh", "-c", "echo started; sleep 30"}, Stdout: io.Discard})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		a.kill()
		select {
		case err := <-done:
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("exec when the agent died: %v; want EIO", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("exec still blocked 10s after the agent died")
		}
		b, _ := c.ReadFile("sandboxes/k/err")
		if !strings.Contains(string(b), "connection lost") && !strings.Contains(string(b), "agent not answering") {
			t.Errorf("sandboxes/k/err = %q; want the lost connection", b)
		}
		out, err := sh(t, e.mnt, "cat sandboxes/k/procs/clone")
		if err == nil {
			t.Errorf("procs/clone on a dead agent: %q", out)
		}
		b, _ = c.ReadFile("sandboxes/k/err")
		if !strings.Contains(string(b), "guest") {
			t.Errorf("sandboxes/k/err after a refused dial = %q", b)
		}
	})
	t.Run("hung agent", func(t *testing.T) {
		h.setHung(t, true)
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := os.ReadDir(filepath.Join(e.mnt, "sandboxes/h/procs"))
			if !errors.Is(err, syscall.ETIMEDOUT) {
				b, _ := os.ReadFile(filepath.Join(e.mnt, "sandboxes/h/err"))
				t.Errorf("ls procs of a hung agent = %v (err %q); want ETIMEDOUT", err, b)
			}
		}()
		// Meanwhile the rest of the tree answers.
		if got := mustSh(t, e.mnt, "cat sandboxes/ok/status; ls sandboxes/ok/procs"); !strings.Contains(got, "ok running") || !strings.Contains(got, "clone") {
			t.Errorf("other sandbox while one hangs: %q", got)
		}
		wg.Wait()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("hung agent took %v to fail", d)
		}
		b, _ := c.ReadFile("sandboxes/h/err")
		if !strings.Contains(string(b), `guest: dial "h"`) {
			t.Errorf("sandboxes/h/err = %q", b)
		}
		h.setHung(t, false)
		if got := mustSh(t, e.mnt, "ls sandboxes/h/procs"); !strings.Contains(got, "clone") {
			t.Errorf("after the agent recovers: %q", got)
		}
		// Now with a session open: requests on it time out and close it.
		h.setHung(t, true)
		if _, err := os.ReadDir(filepath.Join(e.mnt, "sandboxes/h/procs")); !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("ls procs on an open session to a hung agent = %v; want ETIMEDOUT", err)
		}
		if b, _ := c.ReadFile("sandboxes/h/err"); !strings.Contains(string(b), "no answer to") {
			t.Errorf("sandboxes/h/err = %q; want the request that timed out", b)
		}
		h.setHung(t, false)
		if got := mustSh(t, e.mnt, "echo 'echo again' > sandboxes/h/exec; cat sandboxes/h/exec"); got != "again\n" {
			t.Errorf("exec after the agent recovers = %q", got)
		}
	})
}

// TestCLIExitCode runs the sandfs binary's exec against the tree over
// 9P: its exit status is the command's, its streams stay separate.
func TestCLIExitCode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandfs binary")
	}
	bin := filepath.Join(t.TempDir(), "sandfs")
	build := exec.Command("go", "build", "-o", bin, "sandfs/tools/sandfs")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build sandfs: %v\n%s", err, out)
	}
	e := newGuestEnv(t, false)
	e.newSandbox(t, "t")
	run := func(stdin string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{args[0], "--addr", e.addr}, args[1:]...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var o, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &errb
		err := cmd.Run()
		rc := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			rc = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), errb.String(), rc
	}
	if o, e, rc := run("", "exec", "t", "--", "sh", "-c", "echo out; echo err >&2; exit 3"); rc != 3 || o != "out\n" || e != "err\n" {
		t.Errorf("sandfs exec t -- sh -c 'exit 3' = %q, %q, rc %d; want out, err, 3", o, e, rc)
	}
	if o, _, rc := run("abc\n", "exec", "t", "--", "cat"); rc != 0 || o != "abc\n" {
		t.Errorf("stdin: %q, rc %d", o, rc)
	}
	if _, e, rc := run("", "exec", "t", "--", "nosuchcmd-xyz"); rc != 127 || !strings.Contains(e, "not found") {
		t.Errorf("no such command: rc %d, %q; want 127 with the agent's text", rc, e)
	}
	if _, e, rc := run("", "exec", "--cwd", "/nonexistent-dir", "t", "true"); rc != 125 || !strings.Contains(e, "cwd") {
		t.Errorf("no such cwd: rc %d, %q; want 125 with the agent's text", rc, e)
	}
	if o, _, rc := run("", "ls"); rc != 0 || !strings.HasPrefix(o, "t running ") {
		t.Errorf("sandfs ls = %q, rc %d", o, rc)
	}
}

// TestStreamInterrupt9P: a 9P client that clunks a fid blocked in a
// stream read (procs/<n>/stdout of a sleeping command) gets the read
// back at once; the command goes on.
func TestStreamInterrupt9P(t *testing.T) {
	e := newGuestEnv(t, false)
	e.newSandbox(t, "t")
	c := e.client(t)
	if err := c.WriteMsg("sandboxes/t/exec", "sleep 30", "sandboxes/t/err"); err != nil {
		t.Fatal(err)
	}
	st, _ := c.ReadFile("sandboxes/t/execstatus")
	n := strings.Fields(string(st))[0]
	f, err := c.Open("sandboxes/t/procs/"+n+"/stdout", syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.Read(make([]byte, 100))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("read returned before the clunk: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	f.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked 5s after its fid was clunked")
	}
	if st, _ := c.ReadFile("sandboxes/t/procs/" + n + "/status"); !strings.Contains(string(st), "running") {
		t.Errorf("status after the interrupted read = %q; want still running", st)
	}
	c.WriteMsg("sandboxes/t/procs/"+n+"/ctl", "signal KILL", "")
}
