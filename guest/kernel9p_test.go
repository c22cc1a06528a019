package guest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/test/testenv"
)

// TestKernel9P mounts the agent's tree with the Linux 9p client
// (trans=unix) and drives it with plain file I/O and shell tools, as a
// host would through FUSE: clone/ctl/stdout/wait, an err file, fs/ files,
// and Ctrl-C (SIGINT → Tflush) on blocked reads. It needs a kernel with
// 9p (the lab's); elsewhere it skips, in the lab a missing 9p fails.
func TestKernel9P(t *testing.T) {
	needRoot(t)
	fss, _ := os.ReadFile("/proc/filesystems")
	testenv.HandOff(t, strings.Contains(string(fss), "\t9p\n"), "the host kernel has no 9p file system")
	ts := newTestServer(t, Options{})
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go ts.srv.Serve(l)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	if err := unix.Mount(sock, mnt, "9p", 0, "trans=unix,version=9p2000.L,access=any,cache=none,msize=131072"); err != nil {
		t.Fatalf("mount 9p: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)

	// sh runs a shell command through the reaper; returns output, status, time.
	sh := func(cmd string) (string, int, time.Duration) {
		t.Helper()
		r, w, _ := os.Pipe()
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		done := make(chan int, 1)
		start := time.Now()
		_, err := getReaper().start("/bin/sh", []string{"sh", "-c", cmd},
			&syscall.ProcAttr{Dir: mnt, Files: []uintptr{null.Fd(), w.Fd(), w.Fd()}},
			func(ws unix.WaitStatus) { done <- ws.ExitStatus() })
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
		}
		r.Close()
		select {
		case rc := <-done:
			return string(out), rc, time.Since(start)
		case <-time.After(30 * time.Second):
			t.Fatalf("%q hangs; output so far %q", cmd, out)
		}
		return "", 0, 0
	}

	// The clone pattern from a shell, then a status, stdout and wait.
	out, rc, _ := sh(`exec 3<>procs/clone; read n <&3; echo "env X=42" >&3; echo "exec 'echo out \$X; echo err >&2; exit 7'" >&3; ` +
		`cat procs/$n/stdout; cat procs/$n/stderr; cat procs/$n/wait`)
	if rc != 0 || !strings.HasPrefix(out, "out 42\nerr\n") || !strings.Contains(out, " exited code=7 pid=") {
		t.Errorf("clone session: rc %d out %q", rc, out)
	}
	// A refused write gives an errno to the shell and its text in err.
	out, _, _ = sh(`exec 3<>procs/clone; read n <&3; echo bogus >&3 || echo "write failed"; cat procs/$n/err`)
	if out != "write failed\nctl: unknown verb \"bogus\"\n" && !strings.HasSuffix(out, "write failed\nctl: unknown verb \"bogus\"\n") {
		t.Errorf("bad verb: %q", out)
	}

	// Killing a reader blocked in 9p: Linux's 9p client waits killably
	// (p9_client_rpc: wait_event_killable), so SIGINT does nothing there,
	// but SIGKILL makes it send Tflush and wait for Rflush. p9 would
	// answer only when the read ends (the process writes or exits); the
	// agent must end the read at the Tflush, so cat dies at once.
	ctl, err := os.OpenFile(filepath.Join(mnt, "procs/clone"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	b := make([]byte, 32)
	k, _ := ctl.Read(b)
	n := strings.TrimSpace(string(b[:k]))
	if _, err := ctl.Write([]byte("start sleep 100")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"stdout", "stderr", "wait"} {
		_, _, took := sh(fmt.Sprintf("cat procs/%s/%s & c=$!; sleep 0.5; kill -KILL $c; wait $c", n, f))
		if took > 5*time.Second {
			t.Errorf("killed cat of %s took %v", f, took)
		}
	}
	ctl.Write([]byte("signal KILL"))
	if w, _, _ := sh("cat procs/" + n + "/wait"); !strings.Contains(w, "killed signal=9") {
		t.Errorf("wait after kill: %q", w)
	}

	// fs/ through the kernel: create, write, read, rename, symlink, list.
	out, rc, _ = sh(`cd fs && mkdir -p d && printf 'hello' > d/f && cat d/f && mv d/f d/g && ln -s g d/l && readlink d/l && ls d | tr '\n' ' ' && rm -r d`)
	if rc != 0 || out != "hellog\ng l " {
		t.Errorf("fs/ via kernel: rc %d %q", rc, out)
	}
	if _, err := os.Stat(filepath.Join(ts.root, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fs/d still there: %v", err)
	}
}
