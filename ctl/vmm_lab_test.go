package ctl

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sandfs/test/testenv"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// TestVMMRuntime boots the base template through the real VMM (lab only):
// the guest agent comes up on the rootfs disk and answers over the hybrid
// vsock; pause, resume and stop work; no error after stop.
func TestVMMRuntime(t *testing.T) {
	testenv.NeedGuests(t)
	kernel, templates, bin := testenv.Kernel(), testenv.Templates(), testenv.Built("SANDFS_BIN", "bin/sandfs")
	for _, p := range []string{kernel, filepath.Join(templates, "base.ext4"), bin} {
		testenv.NeedFile(t, p, "make build kernel template")
	}
	r := NewVMMRuntime(kernel, templates, nil)
	r.Binary = bin
	dir := t.TempDir()
	uid := 0
	if r.Jailed {
		uid = DefaultVMMIDs.First + 4245
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := r.Start(ctx, Spec{ID: "nosuch", Config: Config{Template: "nosuch"}, Dir: dir, UID: uid}); Errno(err) != 2 {
		t.Errorf("Start(template nosuch) = %v; want ENOENT", err)
	}
	start := time.Now()
	m, err := r.Start(ctx, Spec{ID: "t1", Config: Config{Template: "base", MemBytes: 256 << 20, CPUs: 1}, Dir: dir, UID: uid})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	t.Logf("Start returned after %v, pid %d", time.Since(start), m.(Pider).Pid())

	// The agent serves 9P on vsock 564: the hybrid vsock answers CONNECT.
	sock := filepath.Join(dir, "vsock", "vsock.sock")
	if err := dialAgent(ctx, sock, 2*time.Minute-time.Since(start), 500*time.Millisecond); err != nil {
		con, _ := os.ReadFile(filepath.Join(dir, "console"))
		t.Fatalf("guest agent not reachable over vsock (last error: %v); console:\n%s", err, tailText(string(con), 3000))
	}
	t.Logf("guest agent answered after %v", time.Since(start))
	checkJailed(t, r, m, dir, uid)
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	// Snapshot the running sandbox, stop it, restore it in a new VMM
	// process: the agent answers again (virtio-blk, -vsock, -rng state and
	// the guest's memory came back).
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(WorkDir(Spec{Dir: dir}), "snap")
	start = time.Now()
	if err := VMMProcess(m).Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot took %v", time.Since(start))
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The map was first written as root at open; the jailed VMM rewrote it
	// (by rename in work/) at the guest's flushes and on stop.
	if fi, err := os.Stat(filepath.Join(dir, "work", "rootfs.cow.map")); err != nil {
		t.Error(err)
	} else if owner := fi.Sys().(*syscall.Stat_t).Uid; r.Jailed && int(owner) != uid {
		t.Errorf("rootfs.cow.map owned by uid %d after stop; want %d (not rewritten after the privilege drop?)", owner, uid)
	}
	start = time.Now()
	m2, err := r.StartFrom(ctx, Spec{ID: "t1", Config: Config{Template: "base", MemBytes: 256 << 20, CPUs: 1}, Dir: dir, UID: uid}, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(context.Background())
	t.Logf("restore: StartFrom returned after %v", time.Since(start))
	if err := dialAgent(ctx, sock, time.Minute-time.Since(start), 200*time.Millisecond); err != nil {
		con, _ := os.ReadFile(filepath.Join(dir, "console"))
		log, _ := os.ReadFile(filepath.Join(dir, "vmm.log"))
		t.Fatalf("restored agent not reachable (last error: %v); console:\n%s\nvmm.log:\n%s", err, tailText(string(con), 2000), tailText(string(log), 2000))
	}
	t.Logf("restored guest agent answered after %v", time.Since(start))
	checkJailed(t, r, m2, dir, uid)
	m = m2
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Stop")
	}
	if err := m.Err(); err != nil {
		t.Errorf("Err after Stop = %v", err)
	}
}

// checkJailed: as root, the runtime's VMM runs as the sandbox's uid and
// gid with seccomp, in its jail (its / shows only the first components of
// the paths it needs), the run directory is root's and work/ the uid's,
// and the template image is still root's.
func checkJailed(t *testing.T, r *VMMRuntime, m Machine, dir string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: no privilege drop to check")
		return
	}
	if !r.Jailed || !r.UIDs.Contains(uid) {
		t.Fatalf("NewVMMRuntime as root: Jailed %v, UIDs %v; want jailed, uids holding %d", r.Jailed, r.UIDs, uid)
	}
	pid := m.(Pider).Pid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid":     fmt.Sprintf("%d\t%d\t%d\t%d", uid, uid, uid, uid),
		"Gid":     fmt.Sprintf("%d\t%d\t%d\t%d", uid, uid, uid, uid),
		"Seccomp": "2",
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":\t")
		if w, ok := want[k]; ok {
			if v != w {
				t.Errorf("VMM /proc/pid/status %s: %q; want %q", k, v, w)
			}
			delete(want, k)
		}
	}
	if len(want) != 0 {
		t.Errorf("VMM /proc/pid/status lacks %v:\n%s", want, status)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{"dev": true}
	for _, p := range []string{dir, r.TemplatesDir} {
		abs, _ := filepath.Abs(p)
		top[strings.Split(abs, "/")[1]] = true
	}
	for _, e := range ents {
		if !top[e.Name()] {
			t.Errorf("the VMM's / shows %q; want only %v", e.Name(), top)
		}
	}
	t.Logf("VMM pid %d runs as uid %d gid %d in its jail", pid, uid, uid)
	// Limits: the host's cgroup layout, as status shows it.
	l, err := cgroup.Detect()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(Limiter).Limits(); got != string(l.Mode) {
		t.Errorf("Limits() = %s; want %s (%s)", got, l.Mode, l)
	}
	for p, owner := range map[string]int{dir: 0, filepath.Join(dir, "vsock"): 0, filepath.Join(dir, "work"): uid,
		filepath.Join(dir, "console"): 0, filepath.Join(r.TemplatesDir, "base.ext4"): 0} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != owner {
			t.Errorf("%s owned by uid %d; want %d", p, st.Uid, owner)
		}
	}
}

func tailText(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// dialAgent retries hybrid.Dial to the guest agent's port on the hybrid
// vsock socket sock, every interval, until the agent answers or within
// has passed; it returns the last error.
func dialAgent(ctx context.Context, sock string, within, every time.Duration) error {
	err := fmt.Errorf("dial agent: no attempt in %v", within)
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(every) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var c net.Conn
		c, err = hybrid.Dial(dctx, sock, hybrid.AgentPort)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
	}
	return err
}
