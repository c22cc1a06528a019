package ctl

import (
	"bufio"
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
)

// TestVMMRuntime boots the base template through the real VMM (lab only):
// the guest agent comes up on the rootfs disk and answers over the hybrid
// vsock; pause, resume and stop work; no error after stop.
func TestVMMRuntime(t *testing.T) {
	testenv.NeedGuests(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := func(k, rel string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return filepath.Join(root, rel)
	}
	kernel, templates, bin := env("SANDFS_KERNEL", "build/vmlinuz"), env("SANDFS_TEMPLATES", "build/templates"), env("SANDFS_BIN", "bin/sandfs")
	for _, p := range []string{kernel, filepath.Join(templates, "base.ext4"), bin} {
		testenv.NeedFile(t, p, "make build kernel template")
	}
	r := NewVMMRuntime(kernel, templates, nil)
	r.Binary = bin
	dir := t.TempDir()
	// t.TempDir's parent is 0700: the jailed VMM must be able to search it.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := r.Start(ctx, Spec{ID: "nosuch", Config: Config{Template: "nosuch"}, Dir: dir}); Errno(err) != 2 {
		t.Errorf("Start(template nosuch) = %v; want ENOENT", err)
	}
	start := time.Now()
	m, err := r.Start(ctx, Spec{ID: "t1", Config: Config{Template: "base", MemBytes: 256 << 20, CPUs: 1}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	t.Logf("Start returned after %v, pid %d", time.Since(start), m.(Pider).Pid())

	// The agent serves 9P on vsock 564: the hybrid vsock answers CONNECT.
	var reply string
	for time.Since(start) < 2*time.Minute {
		c, err := net.Dial("unix", filepath.Join(dir, "vsock.sock"))
		if err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write([]byte("CONNECT 564\n"))
			reply, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(reply, "OK ") {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	con, _ := os.ReadFile(filepath.Join(dir, "console"))
	if !strings.HasPrefix(reply, "OK ") {
		t.Fatalf("guest agent not reachable over vsock (last reply %q); console:\n%s", reply, tailText(string(con), 3000))
	}
	t.Logf("guest agent answered after %v", time.Since(start))
	checkJailed(t, r, m, dir)
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
	snap := filepath.Join(dir, "snap")
	start = time.Now()
	if err := VMMProcess(m).Save(ctx, snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot took %v", time.Since(start))
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The map was first written as root at open; the jailed VMM rewrote it
	// (by rename in dir) at the guest's flushes and on stop.
	if fi, err := os.Stat(filepath.Join(dir, "rootfs.cow.map")); err != nil {
		t.Error(err)
	} else if uid := fi.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid != JailUID {
		t.Errorf("rootfs.cow.map owned by uid %d after stop; want %d (not rewritten after the privilege drop?)", uid, JailUID)
	}
	start = time.Now()
	m2, err := r.StartFrom(ctx, Spec{ID: "t1", Config: Config{Template: "base", MemBytes: 256 << 20, CPUs: 1}, Dir: dir}, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(context.Background())
	t.Logf("restore: StartFrom returned after %v", time.Since(start))
	reply = ""
	for time.Since(start) < time.Minute {
		c, err := net.Dial("unix", filepath.Join(dir, "vsock.sock"))
		if err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write([]byte("CONNECT 564\n"))
			reply, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(reply, "OK ") {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(reply, "OK ") {
		con, _ := os.ReadFile(filepath.Join(dir, "console"))
		log, _ := os.ReadFile(filepath.Join(dir, "vmm.log"))
		t.Fatalf("restored agent not reachable (last reply %q); console:\n%s\nvmm.log:\n%s", reply, tailText(string(con), 2000), tailText(string(log), 2000))
	}
	t.Logf("restored guest agent answered after %v", time.Since(start))
	checkJailed(t, r, m2, dir)
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

// checkJailed: as root, the runtime's VMM runs as JailUID/JailGID, owns
// the run directory, and the template image is still root's and unchanged
// in mode.
func checkJailed(t *testing.T, r *VMMRuntime, m Machine, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: no privilege drop to check")
		return
	}
	if r.Jail.UID != JailUID || r.Jail.GID != JailGID {
		t.Fatalf("NewVMMRuntime as root: Jail uid/gid = %d/%d; want %d/%d", r.Jail.UID, r.Jail.GID, JailUID, JailGID)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.(Pider).Pid()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid":     fmt.Sprintf("%d\t%d\t%d\t%d", JailUID, JailUID, JailUID, JailUID),
		"Gid":     fmt.Sprintf("%d\t%d\t%d\t%d", JailGID, JailGID, JailGID, JailGID),
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
	t.Logf("VMM pid %d runs as uid %d gid %d", m.(Pider).Pid(), JailUID, JailGID)
	// Limits: the host's cgroup layout, as status shows it.
	l, err := cgroup.Detect()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(Limiter).Limits(); got != string(l.Mode) {
		t.Errorf("Limits() = %s; want %s (%s)", got, l.Mode, l)
	}
	for p, uid := range map[string]int{dir: JailUID, filepath.Join(r.TemplatesDir, "base.ext4"): 0} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
			t.Errorf("%s owned by uid %d; want %d", p, st.Uid, uid)
		}
	}
}

func tailText(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
