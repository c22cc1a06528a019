package vmmproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"sandfs/ctl/msg"
	"sandfs/fs"
	"sandfs/snapshot"
	"sandfs/vmm"
)

// TestControlMessages checks the ctl grammar and the err file without a
// running VM.
func TestControlMessages(t *testing.T) {
	c := newControl(&fakeMachine{mem: 128 << 20}, &Config{ID: "t1"}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		in    string
		errno syscall.Errno // 0: accepted
		text  string
	}{
		{"", syscall.EINVAL, "ctl: empty message"},
		{"bogus", syscall.EINVAL, `ctl: unknown verb "bogus"`},
		{"paus", syscall.EINVAL, `ctl: unknown verb "paus"`}, // whole words only
		{"status", syscall.EINVAL, `ctl: unknown verb "status"`},
		{"pause now", syscall.EINVAL, `pause: too many arguments "pause now" (usage: pause)`},
		{"save", syscall.EINVAL, `save: missing argument "save" (usage: save <dir>)`},
		{"save '/tmp/a b' x", syscall.EINVAL, `save: too many arguments "save '/tmp/a b' x" (usage: save <dir>)`},
		{"save 'x", syscall.EINVAL, `ctl: unterminated quote "save 'x"`},
		{"pause\nresume", syscall.EINVAL, `ctl: more than one line "pause\nresume"`},
		{"pause", syscall.EBUSY, "pause: not started"},
		{"resume\n", 0, ""}, // not paused: no-op
		{"save /tmp/x", syscall.EBUSY, "save: machine is not paused"},
		{"snapshot", syscall.EINVAL, `snapshot: missing argument "snapshot" (usage: snapshot <dir> [<parent>])`},
		{"snapshot /a /b /c", syscall.EINVAL, `snapshot: too many arguments "snapshot /a /b /c" (usage: snapshot <dir> [<parent>])`},
		{"snapshot s1", syscall.EINVAL, `snapshot: "s1" is not an absolute, clean path`},
		{"snapshot /x/../s1", syscall.EINVAL, `snapshot: "/x/../s1" is not an absolute, clean path`},
		{"snapshot /x/s2 s1", syscall.EINVAL, `snapshot: "s1" is not an absolute, clean path`},
		{"snapshot /x/s2 /y/s1", syscall.EINVAL, `snapshot: parent "/y/s1" is not beside "/x/s2"`},
		{"x-syscall 39", syscall.EINVAL, `ctl: unknown verb "x-syscall"`}, // test hooks off
	} {
		c.lastErr = "(before)"
		err := ctlFile(c, 0).(fs.Sink).Message(ctx, []byte(tc.in))
		if tc.errno == 0 {
			if err != nil || c.lastErr != "(before)" {
				t.Errorf("Message(%q) = %v, err file %q; want nil, unchanged", tc.in, err, c.lastErr)
			}
			continue
		}
		var e *msg.Error
		if !errors.As(err, &e) || e.Errno != tc.errno || e.Text != tc.text {
			t.Errorf("Message(%q) = %v (%v); want %v %q", tc.in, err, msg.Errno(err), tc.errno, tc.text)
		}
		if got := text(t, errFile(c, 0)); got != tc.text+"\n" {
			t.Errorf("after Message(%q): err = %q; want %q", tc.in, got, tc.text+"\n")
		}
	}
	if got := text(t, ctlFile(c, 0)); got != "t1 running\n" {
		t.Errorf("ctl = %q; want %q", got, "t1 running\n")
	}
	if got, want := text(t, statusFile(c, 0)), fmt.Sprintf("running cpus=0 mem=134217728 pid=%d tracking=dirty-log\n", os.Getpid()); got != want {
		t.Errorf("status = %q; want %q", got, want)
	}
	c.cfg.TestHooks = true
	if err := c.message([]byte("x-syscall 39")); err != nil { // getpid
		t.Errorf("x-syscall 39 with test hooks = %v; want nil", err)
	}
	if err := c.message([]byte("x-syscall 1000000")); msg.Errno(err) != syscall.ENOSYS {
		t.Errorf("x-syscall 1000000 with test hooks = %v; want ENOSYS", err)
	}
}

// TestControlSnapshot checks that the snapshot verb creates the store
// and hands the machine its directory and parent, and that the client's
// Snapshot sends them.
func TestControlSnapshot(t *testing.T) {
	store := filepath.Join(t.TempDir(), "snaps")
	m := &fakeMachine{}
	c := newControl(m, &Config{ID: "t1"}, nil)
	for _, in := range []string{"snapshot " + store + "/s1", "snapshot " + store + "/s2 " + store + "/s1"} {
		if err := c.message([]byte(in)); msg.Errno(err) != syscall.EBUSY || err.Error() != "snapshot: machine is not paused" {
			t.Errorf("%s = %v; want EBUSY snapshot: machine is not paused", in, err)
		}
	}
	if fi, err := os.Stat(store); err != nil || !fi.IsDir() {
		t.Errorf("the store was not created: %v", err)
	}
	want := []string{store + "/s1 ", store + "/s2 " + store + "/s1"}
	if fmt.Sprint(m.snaps) != fmt.Sprint(want) {
		t.Errorf("Snapshot calls %q; want %q", m.snaps, want)
	}
}

// text is the whole text of source s.
func text(t *testing.T, n fs.Node) string {
	t.Helper()
	s, ok := n.(fs.Source)
	if !ok {
		t.Fatalf("%T is not readable", n)
	}
	var b bytes.Buffer
	if err := s.Text(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestControlOver9P drives a control tree served on a unix socket (as the
// VMM does) with the daemon's client: the VMM's errno and text come back
// as a *msg.Error, a session cut off by its context is replaced, and stop
// reaches the machine.
func TestControlOver9P(t *testing.T) {
	dir, err := os.MkdirTemp("", "vmmctl") // a short path: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "vmm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMachine{mem: 128 << 20}
	c := newControl(m, &Config{ID: "t1", Disks: []DiskConfig{{Path: "/base", Overlay: "/w/rootfs.cow"}}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.serve(ctx, ln)
	p := &Process{cfg: Config{Socket: sock}, done: make(chan struct{}), exited: make(chan struct{})}
	p.sess = newSession(sock, p.check)
	defer p.sess.close()

	if st, err := p.Status(ctx); err != nil || !strings.HasPrefix(st, "running cpus=0 mem=134217728 pid=") {
		t.Errorf("Status() = %q, %v", st, err)
	}
	for _, tc := range []struct {
		m     string
		errno syscall.Errno
		text  string
	}{
		{"bogus", syscall.EINVAL, `ctl: unknown verb "bogus"`},
		{"pause now", syscall.EINVAL, `pause: too many arguments "pause now" (usage: pause)`},
		{"pause", syscall.EBUSY, "pause: not started"},
		{"save /nonexistent/x", syscall.EBUSY, "save: machine is not paused"},
	} {
		err := p.request(ctx, tc.m)
		var e *msg.Error
		if !errors.As(err, &e) || e.Errno != tc.errno || e.Text != tc.text || !errors.Is(err, tc.errno) {
			t.Errorf("request(%q) = %v (%v); want %v %q", tc.m, err, msg.Errno(err), tc.errno, tc.text)
		}
	}
	if err := p.Resume(ctx); err != nil {
		t.Errorf("Resume() = %v", err)
	}
	snap := filepath.Join(dir, "snaps", "it's 2")
	if err := p.Snapshot(ctx, snap, filepath.Join(dir, "snaps", "s1")); msg.Errno(err) != syscall.EBUSY {
		t.Errorf("Snapshot() = %v; want EBUSY", err)
	}
	if want := snap + " " + filepath.Join(dir, "snaps", "s1"); len(m.snaps) != 1 || m.snaps[0] != want {
		t.Errorf("Snapshot calls %q; want [%q]", m.snaps, want)
	}
	if err := p.Snapshot(ctx, "/x/a\nstop", ""); msg.Errno(err) != syscall.EINVAL || m.stopped.Load() {
		t.Errorf("Snapshot(newline) = %v; want EINVAL, no stop", err)
	}
	if err := p.SaveToDisk(ctx, snap, ""); msg.Errno(err) != syscall.EBUSY || len(m.saves) != 1 || m.saves[0] != snap+" " {
		t.Errorf("SaveToDisk() = %v, calls %q; want EBUSY, [%q]", err, m.saves, snap+" ")
	}
	if err := p.SaveToDisk(ctx, "/x/a\nstop", ""); msg.Errno(err) != syscall.EINVAL || m.stopped.Load() {
		t.Errorf("SaveToDisk(newline) = %v; want EINVAL, no stop", err)
	}
	for _, bad := range []string{"savetodisk", "savetodisk rel", "savetodisk /a/b /c/d", "savetodisk /a/b /a/c /a/d"} {
		if err := p.request(ctx, bad); msg.Errno(err) != syscall.EINVAL || len(m.saves) != 1 {
			t.Errorf("request(%q) = %v, %d calls; want EINVAL, none", bad, err, len(m.saves)-1)
		}
	}
	layer := filepath.Join(dir, "snaps", "s 2.cow")
	if err := p.CloneDisk(ctx, 0, layer); msg.Errno(err) != syscall.EBUSY || len(m.clones) != 1 || m.clones[0] != "0 "+layer {
		t.Errorf("CloneDisk(0) = %v, calls %q; want EBUSY, [%q]", err, m.clones, "0 "+layer)
	}
	if err := p.SyncDisks(ctx); msg.Errno(err) != syscall.EBUSY || m.syncs != 1 {
		t.Errorf("SyncDisks() = %v, %d calls; want EBUSY, 1", err, m.syncs)
	}
	for _, bad := range []string{"syncdisks now", "clonedisk 1 /x", "clonedisk -1 /x", "clonedisk 0 rel", "clonedisk 0 /a/../b"} {
		if err := p.request(ctx, bad); msg.Errno(err) != syscall.EINVAL {
			t.Errorf("request(%q) = %v; want EINVAL", bad, err)
		}
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if err := p.Resume(done); err == nil {
		t.Errorf("Resume(cancelled context) = nil; want an error")
	}
	if err := p.Resume(ctx); err != nil {
		t.Errorf("Resume() after a cancelled request = %v; want nil (a new session)", err)
	}
	if err := p.request(ctx, "stop"); err != nil || !m.stopped.Load() {
		t.Errorf("stop = %v, machine stopped %v; want nil, true", err, m.stopped.Load())
	}
	select {
	case <-c.stopped:
	default:
		t.Errorf("stop did not mark the control stopped")
	}
}

// fakeMachine is a machine that was never started, as *vmm.Machine
// answers then.
type fakeMachine struct {
	mem     uint64
	stopped atomic.Bool
	snaps   []string // Snapshot's arguments, "dir parent"
	saves   []string // SaveToDisk's arguments, "dir parent"
	clones  []string // CloneDisk's arguments, "n dst"
	syncs   int      // SyncDisks calls
}

func (f *fakeMachine) Pause() error  { return msg.Errorf(syscall.EBUSY, "pause: not started") }
func (f *fakeMachine) Resume() error { return nil }
func (f *fakeMachine) Paused() bool  { return false }
func (f *fakeMachine) SaveDir(string) error {
	return fmt.Errorf("save: %w", vmm.ErrNotPaused)
}
func (f *fakeMachine) Snapshot(dir, parent string) (*snapshot.Snapshot, error) {
	f.snaps = append(f.snaps, dir+" "+parent)
	return nil, fmt.Errorf("snapshot: %w", vmm.ErrNotPaused)
}
func (f *fakeMachine) SaveToDisk(dir, parent string) (*snapshot.Snapshot, error) {
	f.saves = append(f.saves, dir+" "+parent)
	return nil, fmt.Errorf("snapshot: %w", vmm.ErrNotPaused)
}
func (f *fakeMachine) DirtyTracking() string         { return vmm.TrackDirtyLog }
func (f *fakeMachine) Stop()                         { f.stopped.Store(true) }
func (f *fakeMachine) Exit() (vmm.ExitReason, error) { return vmm.ExitRunning, nil }
func (f *fakeMachine) CPUs() int                     { return 0 }
func (f *fakeMachine) MemBytes() uint64              { return f.mem }
func (f *fakeMachine) CloneDisk(n int, dst string) error {
	f.clones = append(f.clones, fmt.Sprint(n, " ", dst))
	return fmt.Errorf("clonedisk: %w", vmm.ErrNotPaused)
}

func (f *fakeMachine) SyncDisks() error {
	f.syncs++
	return fmt.Errorf("syncdisks: %w", vmm.ErrNotPaused)
}

// BenchmarkControl measures one control request of the daemon's client
// over a unix socket to a control tree (a fake machine): a ctl write
// (resume), a read of status, and a refused write (two round trips).
func BenchmarkControl(b *testing.B) {
	dir, err := os.MkdirTemp("", "vmmctl")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "vmm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newControl(&fakeMachine{mem: 128 << 20}, &Config{ID: "b"}, nil).serve(ctx, ln)
	p := &Process{cfg: Config{Socket: sock}, done: make(chan struct{}), exited: make(chan struct{})}
	p.sess = newSession(sock, p.check)
	defer p.sess.close()
	for _, bc := range []struct {
		name string
		op   func() error
	}{
		{"resume", func() error { return p.Resume(ctx) }},
		{"status", func() error { _, err := p.Status(ctx); return err }},
		{"refused", func() error {
			if err := p.Pause(ctx); msg.Errno(err) != syscall.EBUSY {
				return fmt.Errorf("pause = %v; want EBUSY", err)
			}
			return nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
