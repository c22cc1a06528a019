// Package netlab tests sandboxes' networks with many real guests at
// once: `sandfs serve` with the VMM runtime, sandboxes restored from the
// base template's snapshot, and servers in a network namespace of the
// test's own behind the lab's, so all traffic stays in the lab. It needs
// /dev/kvm, FUSE, root, the kernel and the template: it runs in the lab
// (test/lab-packages, a binary of its own: test/guestlab is near its lab
// time limit) and hands off elsewhere.
package netlab

import (
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
	"sandfs/vmm/virtio"
	"sandfs/vmm/vmmproc"
)

// need hands the test to the lab unless guests run natively here, and
// fails under CI or in the lab if anything else real guests need is
// missing.
func need(t *testing.T) {
	t.Helper()
	testenv.NeedGuests(t)
	testenv.NeedFUSE(t)
	testenv.NeedRoot(t)
	testenv.NeedFile(t, testenv.Kernel(), "make kernel")
	testenv.NeedFile(t, filepath.Join(testenv.Templates(), "base.ext4"), "make template")
	testenv.NeedFile(t, sandfsBin(), "make build")
}

func sandfsBin() string { return testenv.Built("SANDFS_BIN", "bin/sandfs") }

// daemon is a `sandfs serve` with its FUSE mount.
type daemon struct {
	dir, mnt string
	log      syncbuf.Buffer
	cmd      *exec.Cmd

	mu     sync.Mutex
	failed map[string]bool // sandboxes whose check failed: their logs are shown
}

// startDaemon starts `sandfs serve` in a temporary directory; at the
// test's end it stops it and ends the VMMs it left. A failed test logs
// the daemon's stderr and, for each sandbox marked failed, its status,
// console and vmm.log tails (a lab reset or stall shows there: "vcpu:
// triple fault", a stuck queue).
func startDaemon(t *testing.T) *daemon {
	t.Helper()
	dir := t.TempDir()
	// The VMMs drop privileges and must reach their run directories.
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := &daemon{dir: dir, mnt: filepath.Join(dir, "m"), failed: map[string]bool{}}
	cmd := exec.Command(sandfsBin(), "serve", "--state", filepath.Join(dir, "st"),
		"--listen", "unix:"+filepath.Join(dir, "s.sock"), "--mount", d.mnt,
		"--kernel", testenv.Kernel(), "--templates", testenv.Templates())
	cmd.Stderr = &d.log
	// A failed sandbox's VMM dumps its devices and interrupt state to
	// vmm.log on SIGUSR1 (vmm/virtio.DebugEnv): stop asks for it.
	cmd.Env = append(os.Environ(), virtio.DebugEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	t.Cleanup(func() { d.stop(t) })
	if !testenv.WaitMounted(d.mnt) {
		t.Fatalf("sandfs serve did not mount %s in %v:\n%s", d.mnt, testenv.ServeTimeout, d.log.String())
	}
	return d
}

func (d *daemon) stop(t *testing.T) {
	if t.Failed() {
		d.mu.Lock()
		for id := range d.failed {
			st, _ := os.ReadFile(filepath.Join(d.mnt, "sandboxes", id, "status"))
			if pid := testenv.StatusPid(string(st)); pid > 0 {
				syscall.Kill(pid, syscall.SIGUSR1)
			}
		}
		if len(d.failed) > 0 {
			time.Sleep(2 * time.Second) // the dumps reach vmm.log
		}
		for id := range d.failed {
			st, _ := os.ReadFile(filepath.Join(d.mnt, "sandboxes", id, "status"))
			t.Logf("sandbox %s status: %s", id, st)
			for _, f := range []string{"console", "vmm.log"} {
				b, _ := os.ReadFile(filepath.Join(d.dir, "st/run", id, f))
				t.Logf("sandbox %s %s (tail):\n%s", id, f, b[max(0, len(b)-16000):])
			}
		}
		d.mu.Unlock()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
	if t.Failed() {
		log := d.log.String()
		t.Logf("sandfs serve log (tail):\n%s", log[max(0, len(log)-20000):])
	}
	runs, _ := filepath.Glob(filepath.Join(d.dir, "st/run/*"))
	for _, run := range runs {
		if _, err := vmmproc.EndOrphan(filepath.Join(run, "vmm.sock")); err != nil {
			t.Errorf("ending the VMM in %s: %v", run, err)
		}
	}
}

// fail marks sandbox id's check failed (its logs are shown at the end).
func (d *daemon) fail(id string) {
	d.mu.Lock()
	d.failed[id] = true
	d.mu.Unlock()
}

// sh runs a shell script in the mount: stdout, and stderr in the error.
func (d *daemon) sh(script string) (string, error) { return testenv.Sh(d.mnt, script) }

func (d *daemon) mustSh(t *testing.T, script string) string {
	t.Helper()
	out, err := d.sh(script)
	if err != nil {
		t.Fatalf("sh %q: %v", script, err)
	}
	return out
}

// exec runs cmdline in sandbox id's guest (its exec file) and returns
// its output.
func (d *daemon) exec(id, cmdline string) (string, error) {
	return d.sh("echo '" + cmdline + "' > sandboxes/" + id + "/exec; cat sandboxes/" + id + "/exec")
}

// waitAgent waits until sandbox id's guest agent runs a command (a
// sandbox is "running" as soon as its VMM is).
func (d *daemon) waitAgent(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := d.exec(id, "echo up")
		if err == nil && out == "up\n" {
			return
		}
		if time.Now().After(deadline) {
			d.fail(id)
			t.Fatalf("sandbox %s: guest agent not answering after 2m: %q, %v", id, out, err)
		}
		time.Sleep(time.Second)
	}
}

// connsPy is put in a guest as /root/conns.py: for each host of its
// arguments a TCP connection to port 8080, printing "ok <first line>" or
// "err <errno>" (111 ECONNREFUSED: the policy's reset; "err timeout"
// after 20 s), one line each.
const connsPy = `import socket, sys
for h in sys.argv[1:]:
    s = socket.socket()
    s.settimeout(20)
    try:
        s.connect((h, 8080))
        print("ok", s.makefile().readline().strip())
    except socket.timeout:
        print("err timeout")
    except OSError as e:
        print("err", e.errno)
    s.close()
`

// putConns writes conns.py into sandbox id's guest.
func (d *daemon) putConns(t *testing.T, id string) {
	t.Helper()
	if err := writeFile(d, id, "root/conns.py", connsPy); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes text to path (relative to /) in sandbox id's guest.
func writeFile(d *daemon, id, path, text string) error {
	return os.WriteFile(filepath.Join(d.mnt, "sandboxes", id, "fs", path), []byte(text), 0o644)
}

// conns runs conns.py in sandbox id's guest for hosts.
func (d *daemon) conns(id string, hosts ...string) (string, error) {
	return d.exec(id, "python3 /root/conns.py "+strings.Join(hosts, " "))
}

// parallel runs fn(i) for i in [first, last], n at a time.
func parallel(first, last, n int, fn func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i := first; i <= last; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
