// Package guestlab tests the guest binds end to end with real VMs:
// `sandfs serve` with the VMM runtime, a sandbox booted from the base
// template (sandfs-init as its agent), and the tree used through a FUSE
// mount and the sandfs CLI, as a user would. It needs /dev/kvm, FUSE, the
// kernel and the template: it runs in the lab (test/lab-packages) and
// skips elsewhere.
//
// BenchmarkGuestRatios measures, in one run, exec round trips and fs/
// throughput as ratios to the same work done by the guest's own shell:
//
//	bin/sandfs lab -- /opt/sandfs/bin/tests/test_guestlab.test -test.run='^$' -test.bench=. -test.benchtime=1x
package guestlab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/syncbuf"
	"sandfs/test/testenv"
	"sandfs/test/transcript"
	"sandfs/vmm/vmmproc"
)

// need hands the test to the lab unless guests run natively here (the
// host probe), and fails under CI or in the lab if anything else real
// guests need is missing.
func need(t testing.TB) {
	t.Helper()
	testenv.NeedGuests(t)
	testenv.NeedFUSE(t)
	testenv.NeedFile(t, kernel(), "make kernel")
	testenv.NeedFile(t, filepath.Join(templates(), "base.ext4"), "make template")
	testenv.NeedFile(t, sandfsBin(), "make build")
}

func kernel() string    { return testenv.Kernel() }
func templates() string { return testenv.Templates() }
func sandfsBin() string { return testenv.Built("SANDFS_BIN", "bin/sandfs") }

// daemon is a `sandfs serve` with a FUSE mount and a 9P socket.
type daemon struct {
	mnt, sock string
	log       *syncbuf.Buffer // the daemon's stderr, read while it writes
	dir       string          // the state is dir/st
	cmd       *exec.Cmd       // the running serve; nil once stopped
	args      []string        // sandfs serve's flags beyond the test's own
}

// startDaemon starts `sandfs serve` (with serveArgs beyond the state,
// sockets, kernel and templates it always gets) on a fresh state
// directory, ended with the test along with the VMMs it left.
func startDaemon(t testing.TB, serveArgs ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	// The VMM drops privileges (uid 65534) and must reach its run
	// directory under dir; t.TempDir makes dir and its parent mode 0700.
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := &daemon{dir: dir, mnt: filepath.Join(dir, "m"), sock: filepath.Join(dir, "s.sock"), log: new(syncbuf.Buffer), args: serveArgs}
	t.Cleanup(func() {
		if t.Failed() && d.cmd != nil {
			d.dumpState(t, filepath.Join(dir, "st/run"))
		}
		d.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("sandfs serve log:\n%s", d.log)
			d.logRuns(t)
		}
		d.endVMMs(t)
	})
	d.serve(t)
	return d
}

// logRuns logs the tails of the console and vmm.log of every sandbox d
// has now (the console's tail holds the agent's goroutines after
// dumpState).
func (d *daemon) logRuns(t testing.TB) {
	runs, _ := filepath.Glob(filepath.Join(d.dir, "st/run/*"))
	for _, run := range runs {
		for _, f := range []string{"console", "vmm.log"} {
			b, _ := os.ReadFile(filepath.Join(run, f))
			t.Logf("sandbox %s %s (tail):\n%s", filepath.Base(run), f, b[max(0, len(b)-40000):])
		}
	}
}

// serve starts `sandfs serve` on d's state and waits for its mount.
func (d *daemon) serve(t testing.TB) {
	t.Helper()
	args := append([]string{"serve", "--state", filepath.Join(d.dir, "st"), "--listen", "unix:" + d.sock, "--mount", d.mnt,
		"--kernel", kernel(), "--templates", templates()}, d.args...)
	cmd := exec.Command(sandfsBin(), args...)
	cmd.Stderr = d.log
	// Each VMM dumps its virtio queues and vsock connections to its
	// vmm.log on SIGUSR1 (see vmm/virtio.DebugEnv): a failed test does.
	cmd.Env = append(os.Environ(), "SANDFS_VIRTIO_DEBUG=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	if !testenv.WaitMounted(d.mnt) {
		t.Fatalf("sandfs serve did not mount %s in %v:\n%s", d.mnt, testenv.ServeTimeout, d.log)
	}
}

// stop ends the daemon with sig (SIGKILL after 20 s); its sandboxes'
// VMMs go on running.
func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
}

// endVMMs ends the VMMs the daemon left running (sandfs serve's outlive
// it), so that they do not outlast the test.
func (d *daemon) endVMMs(t testing.TB) {
	runs, _ := filepath.Glob(filepath.Join(d.dir, "st/run/*"))
	for _, run := range runs {
		if _, err := vmmproc.EndOrphan(filepath.Join(run, "vmm.sock")); err != nil {
			t.Errorf("ending the VMM in %s: %v", run, err)
		}
	}
}

// dumpState asks, for a failed test, where every sandbox under runs
// waits: its VMM (found by the config path on its command line) dumps its
// virtio queues and vsock connections to vmm.log on SIGUSR1, and its
// agent, if a new exec still reaches it, its goroutines to the console
// (sandfs-init's SIGUSR1).
func (d *daemon) dumpState(t testing.TB, runs string) {
	n := 0
	for _, pid := range d.vmms() {
		if syscall.Kill(pid, syscall.SIGUSR1) == nil {
			n++
		}
	}
	ids, _ := filepath.Glob(filepath.Join(runs, "*"))
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, sandfsBin(), "exec", "--addr", "unix:"+d.sock, filepath.Base(id), "--", "kill", "-USR1", "1").CombinedOutput()
		cancel()
		t.Logf("sandbox %s: agent goroutines asked for: %s %v", filepath.Base(id), out, err)
	}
	t.Logf("virtio state of %d VMMs asked for (SIGUSR1)", n)
	time.Sleep(time.Second)
}

// sh runs a shell script in the mount and returns stdout; stderr goes to
// the error.
func (d *daemon) sh(t testing.TB, script string) (string, error) {
	t.Helper()
	return testenv.Sh(d.mnt, script)
}

// waitAgent waits until sandbox id's guest agent runs a command: a booted
// sandbox is "running" as soon as its VMM is, while its guest may take
// tens of seconds more to boot under the lab's emulation.
func (d *daemon) waitAgent(t testing.TB, id string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := d.sh(t, "echo 'echo up' > sandboxes/"+id+"/exec; cat sandboxes/"+id+"/exec")
		if err == nil && out == "up\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: guest agent not answering after 2m: %q, %v", id, out, err)
		}
		time.Sleep(time.Second)
	}
}

func (d *daemon) mustSh(t testing.TB, script string) string {
	t.Helper()
	out, err := d.sh(t, script)
	if err != nil {
		t.Fatalf("sh %q: %v", script, err)
	}
	return out
}

// run runs a shell command in sandbox id's guest (its exec file) and
// returns its output, trimmed.
func (d *daemon) run(t testing.TB, id, cmd string) string {
	t.Helper()
	return strings.TrimSpace(d.mustSh(t, "cd sandboxes/"+id+" && echo '"+cmd+"' > exec && cat exec"))
}

// cli runs the sandfs CLI against the daemon's socket.
func (d *daemon) cli(stdin string, args ...string) (stdout, stderr string, rc int) {
	full := append([]string{args[0], "--addr", "unix:" + d.sock}, args[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sandfsBin(), full...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		rc = ee.ExitCode()
	} else if err != nil {
		rc = -1
	}
	return o.String(), e.String(), rc
}

func TestGuestUname(t *testing.T) {
	need(t)
	d := startDaemon(t)
	out := d.mustSh(t, `echo 'new t template=base' > ctl; echo 'uname -a' > sandboxes/t/exec; cat sandboxes/t/exec`)
	f := strings.Fields(out)
	// The guest boots build/vmlinuz (not the lab's own kernel), with
	// host name = sandbox id.
	release := kernelRelease(t, testenv.Kernel())
	if len(f) < 3 || f[0] != "Linux" || f[1] != "t" || f[2] != release {
		t.Errorf("uname -a in the guest = %q; want Linux t %s ...", out, release)
	}
	if st := d.mustSh(t, "cat sandboxes/t/execstatus"); !strings.Contains(st, " exited code=0 ") {
		t.Errorf("execstatus = %q", st)
	}

	t.Run("one fd", func(t *testing.T) {
		got := d.mustSh(t, `cd sandboxes/t; exec 3<>exec; echo 'echo a; echo b >&2; exit 4' >&3; cat <&3; cat execstatus`)
		if !strings.HasPrefix(got, "a\nb\n") || !strings.Contains(got, "exited code=4") {
			t.Errorf("one-fd exec = %q", got)
		}
	})
	t.Run("10 MB", func(t *testing.T) {
		// Hashed on this side only: compute-heavy commands in the nested
		// guest (sha256sum over urandom) have stalled it in the lab.
		out, err := d.sh(t, "cd sandboxes/t && echo 'head -c 10485760 /dev/zero' > exec && cat exec")
		if err != nil || len(out) != 10<<20 || sha256.Sum256([]byte(out)) != sha256.Sum256(make([]byte, 10<<20)) {
			t.Errorf("10 MB through exec: %d bytes, %v; want 10485760 zero bytes", len(out), err)
		}
	})
	t.Run("fs bytes", func(t *testing.T) {
		all := make([]byte, 256*64)
		for i := range all {
			all[i] = byte(i)
		}
		p := filepath.Join(d.mnt, "sandboxes/t/fs/tmp/bytes")
		if err := os.WriteFile(p, all, 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, all) {
			t.Errorf("read back: %d bytes, %v", len(b), err)
		}
		// The guest sees the same bytes: its cat, through exec.
		out, err := d.sh(t, "cd sandboxes/t && echo 'cat /tmp/bytes' > exec && cat exec")
		if err != nil || out != string(all) {
			t.Errorf("guest cat of fs/tmp/bytes: %d bytes, %v; want the 256 values", len(out), err)
		}
	})
	t.Run("cli", func(t *testing.T) {
		o, e, rc := d.cli("", "exec", "t", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if o != "out\n" || e != "err\n" || rc != 3 {
			t.Errorf("sandfs exec = %q, %q, rc %d; want out, err, 3", o, e, rc)
		}
		o, _, rc = d.cli("hello\x00\xff\n", "exec", "t", "--", "cat")
		if o != "hello\x00\xff\n" || rc != 0 {
			t.Errorf("stdin round trip = %q, rc %d", o, rc)
		}
		_, e, rc = d.cli("", "exec", "t", "--", "nosuchcmd")
		if rc != 127 || !strings.Contains(e, "not found") {
			t.Errorf("no such command: rc %d, stderr %q; want 127 and the agent's text", rc, e)
		}
		_, e, rc = d.cli("", "exec", "--cwd", "/nonexistent", "t", "--", "true")
		if rc != 125 || !strings.Contains(e, "cwd") {
			t.Errorf("no such cwd: rc %d, stderr %q; want 125 and the agent's text", rc, e)
		}
		src := filepath.Join(t.TempDir(), "src")
		os.WriteFile(src, []byte("copied\x00\n"), 0o644)
		if _, e, rc := d.cli("", "cp", src, "t:/tmp/copied"); rc != 0 {
			t.Fatalf("cp to guest: rc %d: %s", rc, e)
		}
		if o, e, rc := d.cli("", "cp", "t:/tmp/copied", "-"); rc != 0 || o != "copied\x00\n" {
			t.Errorf("cp from guest = %q, rc %d: %s", o, rc, e)
		}
		if o, _, rc := d.cli("", "ls"); rc != 0 || !strings.HasPrefix(o, "t running ") {
			t.Errorf("sandfs ls = %q, rc %d", o, rc)
		}
	})
	t.Run("console", func(t *testing.T) {
		if got := d.mustSh(t, "cat sandboxes/t/console"); !strings.Contains(got, "sandfs-init") {
			t.Errorf("console has no sandfs-init line: %q", got[max(0, len(got)-300):])
		}
	})
	t.Run("paused", func(t *testing.T) {
		d.mustSh(t, "echo pause > sandboxes/t/ctl")
		_, err := d.sh(t, "echo true > sandboxes/t/exec")
		if err == nil || !strings.Contains(err.Error(), "busy") {
			t.Errorf("exec in a paused sandbox: %v; want EBUSY", err)
		}
		if got := d.mustSh(t, "cat sandboxes/t/err"); !strings.Contains(got, "is paused; need running") {
			t.Errorf("err = %q", got)
		}
		d.mustSh(t, "echo resume > sandboxes/t/ctl")
		if got := d.mustSh(t, "cd sandboxes/t; echo 'echo back' > exec; cat exec"); got != "back\n" {
			t.Errorf("exec after resume = %q", got)
		}
	})
	t.Run("isolation", func(t *testing.T) {
		// A second sandbox from the same template: it sees none of t's
		// files (through its fs/ or its own shell), and each writes to its
		// own copy-on-write disk.
		d.mustSh(t, "echo 'new u template=base' > ctl")
		defer d.sh(t, "echo kill > sandboxes/u/ctl")
		d.waitAgent(t, "u")
		tag := strconv.FormatInt(time.Now().UnixNano(), 36)
		secret, viaExec := "/tmp/secret-"+tag, "/tmp/exec-"+tag
		if err := os.WriteFile(filepath.Join(d.mnt, "sandboxes/t/fs"+secret), []byte(tag+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.mustSh(t, "cd sandboxes/t; echo 'echo "+tag+" > "+viaExec+"' > exec; cat exec")
		if got := d.mustSh(t, "cd sandboxes/t; echo 'cat "+secret+" "+viaExec+"' > exec; cat exec"); got != tag+"\n"+tag+"\n" {
			t.Fatalf("t's own files through exec = %q; want %q twice", got, tag)
		}
		for _, f := range []string{secret, viaExec} {
			if _, err := os.Stat(filepath.Join(d.mnt, "sandboxes/u/fs"+f)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("u's fs/ shows t's %s: %v", f, err)
			}
		}
		if got := d.mustSh(t, "cd sandboxes/u; echo 'ls /tmp; cat "+secret+" "+viaExec+" 2>&1; true' > exec; cat exec"); strings.Contains(got, tag+"\n") || strings.Count(got, "No such file") != 2 {
			t.Errorf("u's shell sees t's files: %q", got)
		}
		d.mustSh(t, "cd sandboxes/t; echo 'echo t-"+tag+" > /root/x' > exec; cat exec")
		if err := os.WriteFile(filepath.Join(d.mnt, "sandboxes/u/fs/root/x"), []byte("u-"+tag+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ id, want string }{{"t", "t-" + tag + "\n"}, {"u", "u-" + tag + "\n"}} {
			if b, err := os.ReadFile(filepath.Join(d.mnt, "sandboxes", c.id, "fs/root/x")); err != nil || string(b) != c.want {
				t.Errorf("%s: fs/root/x = %q, %v; want %q", c.id, b, err, c.want)
			}
			if got := d.mustSh(t, "cd sandboxes/"+c.id+"; echo 'sync; cat /root/x' > exec; cat exec"); got != c.want {
				t.Errorf("%s: cat /root/x in the guest = %q; want %q", c.id, got, c.want)
			}
		}
		// Both still run after the checks.
		if got := d.mustSh(t, "cat sandboxes/t/status sandboxes/u/status"); strings.Count(got, "running") != 2 {
			t.Errorf("status after isolation checks = %q", got)
		}
	})
	t.Run("vmm killed mid-command", func(t *testing.T) {
		d.mustSh(t, "echo new v > ctl; echo 'echo started; sleep 60' > sandboxes/v/exec")
		cat := exec.Command("cat", filepath.Join(d.mnt, "sandboxes/v/exec"))
		var errb bytes.Buffer
		cat.Stderr = &errb
		cat.Stdout = io.Discard
		if err := cat.Start(); err != nil {
			t.Fatal(err)
		}
		// The exec write returned once the command had started in the
		// guest; give cat a moment to block in its read, then kill the VMM
		// under it. What is checked is that the read ends with an error and
		// err explains it. (Whether "started" has streamed through by then
		// is not: busybox cat's sendfile can hold it back, see
		// TestExecStream and docs/filesystem.md.)
		time.Sleep(500 * time.Millisecond)
		st := strings.Fields(d.mustSh(t, "cat sandboxes/v/status"))
		pid := 0
		for _, f := range st {
			if v, ok := strings.CutPrefix(f, "pid="); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
		if pid == 0 {
			t.Fatalf("no VMM pid in status %q", st)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		done := make(chan error, 1)
		go func() { done <- cat.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("cat exec succeeded after the VMM died")
			}
		case <-time.After(30 * time.Second):
			cat.Process.Kill()
			t.Fatal("cat exec still blocked 30s after the VMM died")
		}
		if got := d.mustSh(t, "cat sandboxes/v/err; cat ctl | head -1"); !strings.Contains(got, "new [name]") || len(strings.TrimSpace(got)) < 12 {
			t.Errorf("err and ctl after the VMM died = %q", got)
		}
		t.Logf("cat: %s; err: %s", strings.TrimSpace(errb.String()), d.mustSh(t, "cat sandboxes/v/err"))
	})
	t.Run("kill", func(t *testing.T) {
		if _, e, rc := d.cli("", "kill", "t"); rc != 0 {
			t.Fatalf("sandfs kill: rc %d: %s", rc, e)
		}
		if _, err := d.sh(t, "echo true > sandboxes/t/exec"); err == nil {
			t.Errorf("exec in a dead sandbox succeeded")
		}
	})
}

// BenchmarkGuestRatios measures, in one run and one sandbox:
//
//	exec-true      echo true > exec; cat exec   (one fd, through FUSE)
//	procs-true     procs/clone, start true, read procs/<n>/wait
//	fs-write/read  16 MiB to and from fs/tmp through FUSE, 128 KiB writes
//
// each against the guest's own shell doing the same inside the guest
// (/bin/true forked by sh; dd to and from /tmp), reported as ratios
// (sandfs time / guest time; 1 = no overhead).
func BenchmarkGuestRatios(b *testing.B) {
	need(b)
	d := startDaemon(b)
	d.mustSh(b, `echo 'new t template=base' > ctl; echo true > sandboxes/t/exec; cat sandboxes/t/exec`)
	sb := filepath.Join(d.mnt, "sandboxes/t")
	const n = 50
	guestNs := func(script string) float64 { return d.guestNs(b, "t", script) }
	for range b.N {
		// exec through the exec file.
		t0 := time.Now()
		for range n {
			f, err := os.OpenFile(filepath.Join(sb, "exec"), os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Write([]byte("true\n")); err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, f)
			f.Close()
		}
		execNs := float64(time.Since(t0).Nanoseconds()) / n
		// exec through procs/.
		t0 = time.Now()
		for range n {
			f, err := os.OpenFile(filepath.Join(sb, "procs/clone"), os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 32)
			k, _ := f.Read(buf)
			slot := strings.TrimSpace(string(buf[:k]))
			if _, err := f.WriteAt([]byte("start true"), 0); err != nil {
				b.Fatal(err)
			}
			if _, err := os.ReadFile(filepath.Join(sb, "procs", slot, "wait")); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		procsNs := float64(time.Since(t0).Nanoseconds()) / n
		trueNs := guestNs(fmt.Sprintf(`s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done; e=$(date +%%s%%N); echo $(((e-s)/%d))`, n, n))

		// fs/ throughput.
		const size = 16 << 20
		data := make([]byte, size)
		p := filepath.Join(sb, "fs/tmp/bench")
		t0 = time.Now()
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += 128 << 10 {
			if _, err := f.Write(data[off : off+128<<10]); err != nil {
				b.Fatal(err)
			}
		}
		f.Close()
		writeNs := float64(time.Since(t0).Nanoseconds())
		t0 = time.Now()
		total := readThrough(b, p, 128<<10)
		readNs := float64(time.Since(t0).Nanoseconds())
		if total != size {
			b.Fatalf("read %d bytes of %d", total, size)
		}
		gWrite := guestNs(`s=$(date +%s%N); dd if=/dev/zero of=/tmp/gbench bs=128k count=128 2>/dev/null; e=$(date +%s%N); echo $((e-s))`)
		gRead := guestNs(`s=$(date +%s%N); dd if=/tmp/gbench of=/dev/null bs=128k 2>/dev/null; e=$(date +%s%N); echo $((e-s))`)

		b.ReportMetric(execNs/1e6, "exec-true-ms")
		b.ReportMetric(procsNs/1e6, "procs-true-ms")
		b.ReportMetric(trueNs/1e6, "guest-true-ms")
		b.ReportMetric(execNs/trueNs, "exec/guest")
		b.ReportMetric(procsNs/trueNs, "procs/guest")
		b.ReportMetric(size/(writeNs/1e9)/(1<<20), "fs-write-MiB/s")
		b.ReportMetric(size/(gWrite/1e9)/(1<<20), "guest-write-MiB/s")
		b.ReportMetric(writeNs/gWrite, "fs-write/guest")
		b.ReportMetric(size/(readNs/1e9)/(1<<20), "fs-read-MiB/s")
		b.ReportMetric(size/(gRead/1e9)/(1<<20), "guest-read-MiB/s")
		b.ReportMetric(readNs/gRead, "fs-read/guest")
	}
}

// TestDocLabTranscripts runs the `<!-- transcript: lab -->` blocks of
// docs/filesystem.md against one real daemon, in order (later blocks use
// the sandboxes earlier ones made), each block in a fresh bash in the
// mount, after sandbox d (template base) has started and its agent
// answers. The CLI finds this daemon through $SANDFS_ADDR.
func TestDocLabTranscripts(t *testing.T) {
	need(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := transcript.Parse(filepath.Join(root, "docs/filesystem.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t)
	d.mustSh(t, "echo 'new d template=base' > ctl")
	// Wait through fs/, not exec: an exec would take procs slot 1.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if out, err := d.sh(t, "ls sandboxes/d/fs/"); err == nil && strings.Contains(out, "bin") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox d: guest agent not serving fs/ after 2m")
		}
		time.Sleep(time.Second)
	}
	env := []string{"SANDFS_ADDR=unix:" + d.sock, "PATH=" + filepath.Dir(sandfsBin()) + ":" + os.Getenv("PATH")}
	n := 0
	for _, tr := range ts {
		if !tr.Lab {
			continue
		}
		n++
		t.Run(fmt.Sprintf("line%d", tr.Line), func(t *testing.T) {
			transcript.Run(t, tr, d.mnt, env, 3*time.Minute)
			if t.Failed() {
				// Now: a later transcript may remove the sandboxes
				// (2026-12-04: an agent connection ended right after a
				// snapshot, and the rollback after it took the VMM's
				// log with the sandbox's end).
				d.logRuns(t)
			}
		})
	}
	if n == 0 {
		t.Fatal("no lab transcripts in docs/filesystem.md")
	}
}

// TestExecStream repeats the case of the exec stream's known delay: a
// command that prints a line and then sleeps, and a reader of exec
// started right after the write. It runs the case on a warm sandbox
// many times and on fresh sandboxes (the first exec in a guest just
// booted) with two readers: read(2) of 128 KiB, which must see the line
// at once (while the command still runs) every time, and the lab's cat
// (busybox), which copies with sendfile(2) into its stdout pipe. The
// second is the delay of docs/filesystem.md: after a short first part,
// cat's next sendfile holds its output pipe's lock while the FUSE read
// under it waits for more output, so the line already in the pipe
// cannot be read out of it until the command writes again or exits.
// That case is counted and logged, once warm and once fresh (a late run
// costs the whole command, 20 s); with SANDFS_TEST_EXEC_STREAM_CAT=1 it
// is every other run and fails the test (it is open). Late is not a
// time: the line is late when it comes only as the command ends
// (execstatus no longer running), so a slow lab cannot fail the test.
// (The line is not looked for in procs/<n>/stdout beside the reader:
// that read would take it.) SANDFS_TEST_EXEC_STREAM_WARM and _FRESH set
// the number of runs (30 and 3).
func TestExecStream(t *testing.T) {
	need(t)
	d := startDaemon(t)
	warm := envInt("SANDFS_TEST_EXEC_STREAM_WARM", 30)
	fresh := envInt("SANDFS_TEST_EXEC_STREAM_FRESH", 3)
	d.mustSh(t, "echo 'new w template=base' > ctl")
	d.waitAgent(t, "w")
	// A late cat run waits for the whole command (20 s): unless the case
	// is to fail the test, it runs once warm and once fresh, to keep
	// it in the log.
	catAll := os.Getenv("SANDFS_TEST_EXEC_STREAM_CAT") == "1"
	late, runs := map[string]int{}, map[string]int{}
	for i := range warm + fresh {
		id := "w"
		if i >= warm {
			id = fmt.Sprintf("f%d", i-warm)
			d.mustSh(t, "echo 'new "+id+" template=base' > ctl")
		}
		reader := "read(2)"
		if i%2 == 1 && (catAll || i == 1 || i == warm+1) {
			reader = "cat"
		}
		runs[reader]++
		if !d.streamsAtOnce(t, id, i, reader) {
			late[reader]++
		}
		if id != "w" {
			d.cli("", "kill", id)
		}
	}
	if n := late["read(2)"]; n > 0 {
		t.Errorf("%d of %d runs: the first line of `echo started; sleep 20` did not reach a read(2) of exec before the command ended", n, runs["read(2)"])
	}
	if n := late["cat"]; n > 0 {
		msg := fmt.Sprintf("%d of %d runs: the first line did not reach busybox cat (sendfile) before the command ended (known, open)", n, runs["cat"])
		if catAll {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}

// streamsAtOnce runs one case in sandbox id with reader ("cat" or
// "read(2)") and reports whether the line arrived in time.
func (d *daemon) streamsAtOnce(t *testing.T, id string, i int, reader string) bool {
	t.Helper()
	sb := filepath.Join(d.mnt, "sandboxes", id)
	t0 := time.Now()
	d.mustSh(t, "echo 'echo started; sleep 20' > sandboxes/"+id+"/exec")
	wrote := time.Since(t0)
	got := make(chan string, 1)
	t1 := time.Now()
	var err error
	if reader == "cat" {
		cat := exec.Command("cat", filepath.Join(sb, "exec"))
		pr, perr := cat.StdoutPipe()
		if perr != nil {
			t.Fatal(perr)
		}
		if err := cat.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cat.Process.Kill(); cat.Wait() }()
		go func() {
			b := make([]byte, 8)
			n, _ := io.ReadFull(pr, b)
			got <- string(b[:n])
		}()
	} else {
		f, ferr := os.Open(filepath.Join(sb, "exec"))
		if ferr != nil {
			t.Fatal(ferr)
		}
		go func() {
			defer f.Close()
			b := make([]byte, 128<<10)
			n, _ := f.Read(b)
			got <- string(b[:n])
		}()
	}
	// The known delay holds the line until the command writes again or
	// exits (at 20 s): a line that comes while the command still runs
	// came at once, however slow the lab; one that comes only as the
	// command ends, or not at all, was held. (The bound is a guard
	// against a hang, not the measure.)
	var out string
	select {
	case out = <-got:
	case <-time.After(2 * time.Minute):
		err = errors.New("no line and no EOF within 2 min; the command ends at 20 s")
	}
	first := time.Since(t1)
	st, _ := d.sh(t, "cat sandboxes/"+id+"/execstatus")
	running := strings.Contains(st, " running ")
	if out == "started\n" && running {
		t.Logf("run %d (%s, %s): write %v, first line %v", i, id, reader, wrote.Round(time.Millisecond), first.Round(time.Millisecond))
		return true
	}
	logf := t.Errorf
	if reader == "cat" {
		logf = t.Logf
	}
	logf("run %d (%s, %s): exec read after %v: %q, %v; execstatus %q then (the line came only when the command ended)",
		i, id, reader, first.Round(time.Millisecond), out, err, strings.TrimSpace(st))
	return false
}

// guestNs runs script, which prints a number of nanoseconds it timed, in
// sandbox id's guest and returns that number.
func (d *daemon) guestNs(tb testing.TB, id, script string) float64 {
	tb.Helper()
	out := d.mustSh(tb, "cd sandboxes/"+id+"; echo '"+script+"' > exec; cat exec")
	v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		tb.Fatalf("guest timing %q: %q", script, out)
	}
	return v
}

// readThrough reads the file at p to its end (or its first error) in
// reads of chunk bytes, and returns how many bytes it read.
func readThrough(tb testing.TB, p string, chunk int) int {
	tb.Helper()
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	total := 0
	for {
		n, err := f.Read(buf)
		total += n
		if n == 0 || err != nil {
			return total
		}
	}
}

// kernelRelease is the release of the bzImage at path ("6.1.192"): the
// first word of the version string its setup header points to
// (kernel_version at 0x20e, an offset from 0x200).
func kernelRelease(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
		t.Fatalf("%s is not a bzImage", path)
	}
	off := 0x200 + int(binary.LittleEndian.Uint16(b[0x20e:]))
	if off >= len(b) {
		t.Fatalf("%s: kernel_version offset %#x beyond the file", path, off)
	}
	v := b[off:]
	if i := bytes.IndexByte(v, 0); i >= 0 {
		v = v[:i]
	}
	f := strings.Fields(string(v))
	if len(f) == 0 {
		t.Fatalf("%s: empty kernel_version", path)
	}
	return f[0]
}
