package vmmproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"sandfs/ctl/msg"
	"sandfs/vmm"
)

// TestControlGrammar checks the control protocol's replies that need no
// running VM.
func TestControlGrammar(t *testing.T) {
	m := &fakeMachine{mem: 128 << 20}
	s := &controlServer{m: m, cfg: &Config{}, stopped: make(chan struct{})}
	for _, tc := range []struct{ in, want string }{
		{"", "err EINVAL ctl: empty message"},
		{"bogus", `err EINVAL ctl: unknown verb "bogus"`},
		{"paus", `err EINVAL ctl: unknown verb "paus"`}, // whole words only
		{"status extra", `err EINVAL status: too many arguments "status extra" (usage: status)`},
		{"save", `err EINVAL save: missing argument "save" (usage: save <dir>)`},
		{"save '/tmp/a b' x", `err EINVAL save: too many arguments "save '/tmp/a b' x" (usage: save <dir>)`},
		{"save 'x", `err EINVAL ctl: unterminated quote "save 'x"`},
		{"status", "ok running cpus=0 mem=134217728 pid="},
		{"  status\t", "ok running cpus=0 mem=134217728 pid="},
		{"pause", "err EBUSY pause: not started"},
		{"resume", "ok"}, // not paused: no-op
		{"save /tmp/x", "err EBUSY save: machine is not paused"},
		{"x-syscall 39", `err EINVAL ctl: unknown verb "x-syscall"`}, // test hooks off
	} {
		got, _ := s.handle(tc.in)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("handle(%q) = %q; want prefix %q", tc.in, got, tc.want)
		}
	}
	s.cfg.TestHooks = true
	if got, _ := s.handle("x-syscall 39"); !strings.HasPrefix(got, "ok errno=0") { // getpid
		t.Errorf("handle(x-syscall 39) with test hooks = %q; want ok errno=0", got)
	}
}

// TestControlErrno checks that the daemon's side gets the VMM's errno and
// text back: Process.request over a connection to a controlServer.
func TestControlErrno(t *testing.T) {
	m := &fakeMachine{mem: 128 << 20}
	s := &controlServer{m: m, cfg: &Config{}, stopped: make(chan struct{})}
	c1, c2 := net.Pipe()
	defer c1.Close()
	go s.conn(c2)
	p := &Process{conn: c1, rd: bufio.NewReader(c1), done: make(chan struct{})}
	ctx := context.Background()

	if st, err := p.Status(ctx); err != nil || !strings.HasPrefix(st, "running cpus=0 mem=134217728 pid=") {
		t.Errorf("Status() = %q, %v", st, err)
	}
	for _, tc := range []struct {
		line  string
		errno syscall.Errno
		text  string
	}{
		{"bogus", syscall.EINVAL, `ctl: unknown verb "bogus"`},
		{"status now", syscall.EINVAL, `status: too many arguments "status now" (usage: status)`},
		{"pause", syscall.EBUSY, "pause: not started"},
		{"save /nonexistent/x", syscall.EBUSY, "save: machine is not paused"},
	} {
		_, err := p.Request(ctx, tc.line)
		var e *msg.Error
		if !errors.As(err, &e) || e.Errno != tc.errno || e.Text != tc.text || !errors.Is(err, tc.errno) {
			t.Errorf("Request(%q) = %v (%v); want %v %q", tc.line, err, msg.Errno(err), tc.errno, tc.text)
		}
	}
	if err := p.Resume(ctx); err != nil {
		t.Errorf("Resume() = %v", err)
	}
}

// fakeMachine is a machine that was never started, as *vmm.Machine
// answers then.
type fakeMachine struct{ mem uint64 }

func (f *fakeMachine) Pause() error  { return msg.Errorf(syscall.EBUSY, "pause: not started") }
func (f *fakeMachine) Resume() error { return nil }
func (f *fakeMachine) Paused() bool  { return false }
func (f *fakeMachine) SaveDir(string) error {
	return fmt.Errorf("save: %w", vmm.ErrNotPaused)
}
func (f *fakeMachine) Stop()                         {}
func (f *fakeMachine) Exit() (vmm.ExitReason, error) { return vmm.ExitRunning, nil }
func (f *fakeMachine) CPUs() int                     { return 0 }
func (f *fakeMachine) MemBytes() uint64              { return f.mem }
