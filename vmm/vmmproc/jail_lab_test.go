package vmmproc_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/ctl"
	"sandfs/test/testenv"
	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/vsock/hybrid"
	"sandfs/vmm/vmmproc"
)

// TestJailedVMMAttacks plays a compromised VMM in the daemon's own setup:
// ctl's VMM runtime, as the daemon runs it as root, starts a victim
// sandbox and an attacker whose VMM is this test binary (TestMain), which
// once confined attacks (attack_test.go): it reads host files, renames,
// opens and replaces the victim's disk, map, console, log and agent
// socket, listens beside that socket, replaces the files of its own run
// directory that root writes, makes sockets of every family but unix,
// dials the host's TCP, unix and abstract sockets, forks, makes a user
// namespace and issues a non-KVM ioctl. Each is refused; the victim's run
// directory is unchanged, its agent still answers, no host socket saw a
// connection, and nothing was created in the host's /tmp, /dev/shm or
// /var/tmp. Before the jail and per-sandbox uids (all VMMs uid 65534, run
// directories theirs, no pivot_root, any socket family) the renames, the
// host reads, the sockets and the replacement of its own console all
// succeeded.
func TestJailedVMMAttacks(t *testing.T) {
	testenv.NeedGuests(t)
	testenv.NeedRoot(t)
	kernel, templates := testenv.Kernel(), testenv.Templates()
	testenv.NeedFile(t, filepath.Join(templates, "base.ext4"), "make template")
	testenv.NeedFile(t, kernel, "make kernel")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := ctl.NewVMMRuntime(kernel, templates, nil)
	r.Binary = exe
	if !r.Jailed {
		t.Fatal("NewVMMRuntime as root does not jail its VMMs")
	}
	run := filepath.Join(t.TempDir(), "run")
	spec := func(id string, n int) ctl.Spec {
		s := ctl.Spec{ID: id, Config: ctl.Config{Template: "base", MemBytes: 256 << 20, CPUs: 1},
			Dir: filepath.Join(run, id), UID: r.UIDs.First + 4246 + n}
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var lns []net.Listener
	for _, a := range []string{filepath.Join(run, "host.sock"), "@" + run + "/abstract"} {
		if err := os.MkdirAll(run, 0o700); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", a)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // two boots and the attacks, nested under a loaded lab (3 minutes ran out)
	defer cancel()

	// The victim, up to its agent, then paused so that its files hold still.
	vs := spec("victim", 0)
	victim, err := r.Start(ctx, vs)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Stop(context.Background())
	agent := func() error { return waitAgent(ctx, vs.Dir) }
	if err := agent(); err != nil {
		t.Fatalf("the victim's agent does not answer: %v", err)
	}
	if err := victim.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	// The pause's own log line reaches vmm.log through a pipe, after
	// Pause returns (a CI run saw the victim's log "change" by it).
	if l := vmmproc.WaitLog(filepath.Join(vs.Dir, "vmm.log"), "vcpu: paused"); !strings.Contains(l, "vcpu: paused") {
		t.Fatalf("the victim's vmm.log has no pause line:\n%s", l)
	}
	before := vmmproc.SnapshotTree(t, vs.Dir)

	as := spec(vmmproc.AttackID, 1)
	attacker, err := r.Start(ctx, as)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Stop(context.Background())
	logPath := filepath.Join(as.Dir, "vmm.log")
	var out string
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out, "attack done"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the attacker did not finish; vmm.log:\n%s", out)
		}
		b, _ := os.ReadFile(logPath)
		// The daemon writes on through its fd: if the attacker moved
		// its log away (an attack that must fail), the lines are there.
		old, _ := os.ReadFile(logPath + ".old")
		out = string(b) + string(old)
	}
	var cfg vmmproc.Config
	b, err := os.ReadFile(filepath.Join(as.Dir, "vmm.sock.json"))
	if err != nil { // moved away by a successful attack (reported below)
		b, err = os.ReadFile(filepath.Join(as.Dir, "vmm.sock.json.old"))
	}
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		t.Fatalf("the attacker's config: %v", err)
	}
	vmmproc.CheckAttacks(t, out, &cfg, lns, before, vs.Dir)
	for _, f := range []string{"console", "vmm.log", "vmm.sock", "vmm.sock.json", "vsock/vsock.sock"} {
		if _, err := os.Lstat(filepath.Join(as.Dir, f)); err != nil {
			t.Errorf("the attacker's own %s: %v", f, err)
		}
	}
	if err := victim.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := agent(); err != nil {
		t.Errorf("the victim's agent no longer answers: %v", err)
	}
	if err := attacker.Err(); err != nil {
		t.Errorf("the attacker's VMM died: %v", err)
	}
}

// agentUp waits for the agent of m's guest (run directory dir); if it
// never answers, the test fails with m's VMM's state dump from its log:
// a vCPU RIP in the lab kernel's SVM code there makes
// tools/lab/run-tests.sh run the test again (faults.sh's labsvmrips).
// The test sets virtio.DebugEnv before m starts, so that its VMM dumps
// on SIGUSR1 (ci19's TestJailedSnapshotChain waited 2 minutes for a cold
// boot's agent and left nothing to read); TestJailedVMMAttacks cannot:
// its VMMs' environment must be empty.
func agentUp(ctx context.Context, t *testing.T, m ctl.Machine, dir, what string) {
	t.Helper()
	err := waitAgent(ctx, dir)
	if err == nil {
		return
	}
	p, ok := m.(ctl.Pider)
	if !ok || os.Getenv(virtio.DebugEnv) == "" { // without it, SIGUSR1 ends the VMM
		t.Fatalf("%s does not answer: %v (no dump: not asked)", what, err)
	}
	syscall.Kill(p.Pid(), syscall.SIGUSR1)
	l := vmmproc.WaitLog(filepath.Join(dir, "vmm.log"), "virtio debug dump", "interrupts:")
	if i := strings.LastIndex(l, "virtio debug dump"); i >= 0 {
		l = l[i:]
	}
	t.Fatalf("%s does not answer: %v; its VMM's dump:\n%s", what, err, l)
}

// waitAgent retries the hybrid-vsock handshake to the guest agent of the
// sandbox whose run directory is dir for up to two minutes; it returns
// the last error.
func waitAgent(ctx context.Context, dir string) error {
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var c net.Conn
		c, err = hybrid.Dial(dctx, filepath.Join(dir, "vsock", "vsock.sock"), hybrid.AgentPort)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
	}
	return err
}
