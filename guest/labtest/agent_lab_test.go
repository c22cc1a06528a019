// Package labtest boots the base template (bin/sandfs-init as /sbin/init)
// in a real VMM and drives the guest agent over the VMM's hybrid vsock,
// the way the host daemon will. It needs KVM, build/vmlinuz and
// build/templates/base.ext4: it skips without them, except in the lab
// (SANDFS_LAB=1), where that is a failure. It is a separate package so
// that the guest unit tests do not depend on the VMM building.
package labtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/fs/ninep"
	"sandfs/test/testenv"
	"sandfs/vmm/virtio/vsock/hybrid"
	"sandfs/vmm/vmmproc"
)

// TestMain doubles as the `sandfs vmm` process that vmmproc.Launch starts.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "vmm" {
		os.Exit(vmmproc.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const bootTimeout = 3 * time.Minute // nested KVM under TCG is slow

// need fails (under CI or in the lab) or skips when a built file is missing.
func need(t *testing.T, what string, err error) {
	t.Helper()
	testenv.Need(t, err == nil, fmt.Sprintf("needs %s: %v", what, err))
}

// vm is a booted template and the VMM process running it.
type vm struct {
	t   *testing.T
	cfg vmmproc.Config
	p   *vmmproc.Process
}

// bootVM boots the template and returns the agent's root over vsock.
func bootVM(t *testing.T, extraCmdline string) (*vm, p9.File) {
	t.Helper()
	testenv.NeedGuests(t)
	kernel := testenv.Kernel()
	_, err := os.Stat(kernel)
	need(t, "a kernel (make kernel)", err)
	tmplDir := testenv.Templates()
	base := filepath.Join(tmplDir, "base.ext4")
	_, err = os.Stat(base)
	need(t, "the base template (make template)", err)

	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := vmmproc.Config{
		ID: "agent", Kernel: kernel, MemBytes: 512 << 20, CPUs: 1,
		Cmdline: "root=/dev/vda rw rootfstype=ext4 init=/sbin/init console=ttyS0 sandfs.hostname=agent-test " +
			"sandfs.time=" + strconv.FormatInt(time.Now().UnixNano(), 10) + " " + extraCmdline,
		Disks:  []vmmproc.DiskConfig{{Path: base, Overlay: filepath.Join(dir, "overlay")}},
		Vsock:  &vmmproc.VsockConfig{CID: 3, UDS: filepath.Join(dir, "v.sock")},
		Socket: filepath.Join(dir, "ctl.sock"), Console: filepath.Join(dir, "console"),
		LogFile: filepath.Join(dir, "vmm.log"),
	}
	v := &vm{t: t, cfg: cfg}
	return v, v.launch()
}

// launch starts v.cfg (a boot or a restore) and attaches to the agent.
func (v *vm) launch() p9.File {
	t := v.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	p, err := vmmproc.Launch(ctx, v.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v.p = p
	console := v.cfg.Console
	t.Cleanup(func() {
		if t.Failed() {
			// Why the VMM ended, if it did before the test was over.
			select {
			case <-p.Done():
				r, err := p.Wait()
				t.Logf("the vmm had ended: %s %v", r, err)
			default:
				t.Logf("the vmm was still running")
			}
		}
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("console %s:\n%s", console, tail(string(b), 4000))
			b, _ = os.ReadFile(v.cfg.LogFile)
			t.Logf("vmm log %s:\n%s", v.cfg.LogFile, tail(string(b), 3000))
		}
	})
	start := time.Now()
	for {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := hybrid.Dial(dctx, v.cfg.Vsock.UDS, hybrid.AgentPort)
		dcancel()
		if err == nil {
			var cl *p9.Client
			var root p9.File
			if cl, err = ninep.NewClient(c, 512<<10); err == nil {
				if root, err = cl.Attach("/"); err != nil {
					cl.Close()
				}
			}
			if err == nil {
				t.Cleanup(func() { cl.Close() })
				t.Logf("agent answered %v after launch", time.Since(start).Round(time.Millisecond))
				return root
			}
			// Right after a restore the guest's vsock transport is
			// being reset and may drop a first connection: retry.
			t.Logf("attach: %v (retrying)", err)
			c.Close()
		}
		if time.Since(start) > bootTimeout {
			t.Fatalf("no agent on vsock port 564 after %v: %v", bootTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func walkOpen(t *testing.T, root p9.File, path string, mode p9.OpenFlags) p9.File {
	t.Helper()
	_, f, err := root.Walk(strings.Split(path, "/"))
	if err != nil {
		t.Fatalf("walk %s: %v", path, err)
	}
	if _, _, err := f.Open(mode); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return f
}

func readAll(t *testing.T, f p9.File) string {
	t.Helper()
	var out []byte
	b := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(b, int64(len(out)))
		out = append(out, b[:n]...)
		if n == 0 || err != nil {
			if err != nil && err != io.EOF {
				t.Fatalf("read: %v", err)
			}
			return string(out)
		}
	}
}

// run starts a process with msgs and returns its stdout and wait line.
func run(t *testing.T, root p9.File, msgs ...string) (string, string) {
	t.Helper()
	ctl := walkOpen(t, root, "procs/clone", p9.ReadWrite)
	defer ctl.Close()
	n := strings.TrimSpace(readAll(t, ctl))
	for _, m := range msgs {
		if _, err := ctl.WriteAt([]byte(m), 0); err != nil {
			e := walkOpen(t, root, "procs/"+n+"/err", p9.ReadOnly)
			t.Fatalf("%q: %v (%s)", m, err, readAll(t, e))
		}
	}
	out := walkOpen(t, root, "procs/"+n+"/stdout", p9.ReadOnly)
	defer out.Close()
	o := readAll(t, out)
	w := walkOpen(t, root, "procs/"+n+"/wait", p9.ReadOnly)
	defer w.Close()
	return o, readAll(t, w)
}

func TestAgentInTemplate(t *testing.T) {
	v, root := bootVM(t, "")
	defer func() {
		b, _ := os.ReadFile(v.cfg.Console)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "sandfs-init:") {
				t.Log(l)
			}
		}
	}()
	out, w := run(t, root, `exec 'hostname; cat /proc/1/comm; id -u user; awk ''{print $3}'' /proc/mounts | sort -u | tr "\n" " "; echo; date +%s'`)
	if !strings.Contains(w, "exited code=0") {
		t.Fatalf("wait %q, stdout %q", w, out)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 5 || lines[0] != "agent-test" || lines[2] != "1000" {
		t.Errorf("hostname, init, uid of user: %q", out)
	}
	for _, fs := range []string{"proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "cgroup2", "ext4"} {
		if !strings.Contains(lines[3], fs) {
			t.Errorf("no %s mounted: %s", fs, lines[3])
		}
	}
	if sec, _ := strconv.ParseInt(lines[4], 10, 64); sec < time.Now().Add(-5*time.Minute).Unix() {
		t.Errorf("guest clock %s, host %d: sandfs.time not applied", lines[4], time.Now().Unix())
	}

	out, _ = run(t, root, "user user", `exec 'id -un; pwd; echo $HOME'`)
	if out != "user\n/home/user\n/home/user\n" {
		t.Errorf("as user: %q", out)
	}
	out, _ = run(t, root, "pty on", "size 30 100", `exec 'tty; stty size'`)
	if !strings.HasPrefix(out, "/dev/pts/") || !strings.Contains(out, "30 100") {
		t.Errorf("pty: %q", out)
	}
	// fs/ is the guest's root.
	pw := walkOpen(t, root, "fs/etc/passwd", p9.ReadOnly)
	if s := readAll(t, pw); !strings.Contains(s, "\nuser:x:1000:1000:") {
		t.Errorf("fs/etc/passwd has no user:\n%s", s)
	}
	pw.Close()
	// Zombies are reaped: an orphan's parent is init, and it goes away.
	out, _ = run(t, root, `exec '(sleep 0.5 &) ; sleep 1.5; ps -eo stat= | grep -c ^Z || true'`)
	if strings.TrimSpace(out) != "0" {
		t.Errorf("zombies after orphan exit: %q", out)
	}
}

// TestAgentAcrossSnapshot: a process started through the agent keeps
// running across pause, save, stop and restore in a new VMM process; the
// host reconnects over vsock and finds it; the agent's ctl sets the clock
// that stood still.
func TestAgentAcrossSnapshot(t *testing.T) {
	v, root := bootVM(t, "")
	ctl := walkOpen(t, root, "procs/clone", p9.ReadWrite)
	n := strings.TrimSpace(readAll(t, ctl))
	if _, err := ctl.WriteAt([]byte(`exec 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'`), 0); err != nil {
		t.Fatal(err)
	}
	ctl.Close()
	// The loop has run once before the snapshot (in a loaded lab its
	// first round can take longer than any fixed wait).
	for deadline := time.Now().Add(bootTimeout); ; time.Sleep(100 * time.Millisecond) {
		_, f, err := root.Walk(strings.Split("fs/tmp/count", "/"))
		if err == nil {
			f.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop wrote no /tmp/count in %v: %v", bootTimeout, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := v.p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(filepath.Dir(v.cfg.Socket), "snap")
	if err := v.p.Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := v.p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	v.p.Wait()
	saved := time.Now()
	time.Sleep(3 * time.Second) // the guest clock stands still meanwhile

	v.cfg.Restore = snap
	v.cfg.Console = v.cfg.Console + "2"
	root = v.launch()
	st := walkOpen(t, root, "procs/"+n+"/status", p9.ReadOnly)
	if s := readAll(t, st); !strings.HasPrefix(s, n+" running pid=") {
		t.Errorf("after restore: status %q", s)
	}
	// The loop replaces /tmp/count by rename: a read never sees it
	// half-written (it did when the loop rewrote it in place).
	count := func() int {
		f := walkOpen(t, root, "fs/tmp/count", p9.ReadOnly)
		defer f.Close()
		s := readAll(t, f)
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("/tmp/count %q: %v", s, err)
		}
		return c
	}
	c1 := count()
	time.Sleep(time.Second)
	if c2 := count(); c2 <= c1 {
		t.Errorf("process not running after restore: count %d then %d", c1, c2)
	}
	// The clock: set it from the host, then read it back.
	actl := walkOpen(t, root, "ctl", p9.ReadWrite)
	now := time.Now()
	if _, err := actl.WriteAt([]byte("time "+strconv.FormatInt(now.UnixNano(), 10)), 0); err != nil {
		t.Fatal(err)
	}
	s := readAll(t, actl)
	i := strings.Index(s, "now=")
	gns, _ := strconv.ParseInt(strings.TrimSpace(s[i+4:]), 10, 64)
	if d := time.Unix(0, gns).Sub(time.Now()); d < -30*time.Second || d > 30*time.Second {
		t.Errorf("guest clock off by %v after time (saved %v ago)", d, time.Since(saved))
	}
	w := walkOpen(t, root, "procs/"+n+"/ctl", p9.WriteOnly)
	if _, err := w.WriteAt([]byte("signal KILL"), 0); err != nil {
		t.Error(err)
	}
	wf := walkOpen(t, root, "procs/"+n+"/wait", p9.ReadOnly)
	if s := readAll(t, wf); !strings.Contains(s, "killed signal=9") {
		t.Errorf("wait %q", s)
	}
}
