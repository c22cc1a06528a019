package ctl

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"sandfs/vmm/virtio/vsock/hybrid"
)

// guestMachine is a fakeMachine that can reach a guest: DialGuest
// returns one end of a pipe (the handshake itself is tested in package
// hybrid).
type guestMachine struct {
	*fakeMachine
}

func (m *guestMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	c, guest := net.Pipe()
	guest.Close()
	return c, nil
}

func (m *guestMachine) ConsolePath() string { return "/run/x/console" }

type guestRuntime struct{}

func (r guestRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	return &guestMachine{fakeMachine: &fakeMachine{done: make(chan struct{})}}, nil
}

func TestSandboxDialGuest(t *testing.T) {
	ctx := context.Background()
	p, _ := openPlane(t, t.TempDir(), guestRuntime{})
	if _, err := p.Ctl(ctx, []byte("new g")); err != nil {
		t.Fatal(err)
	}
	s, _ := p.Lookup("g")
	c, err := s.DialGuest(ctx, hybrid.AgentPort)
	if err != nil {
		t.Fatalf("DialGuest = %v", err)
	}
	c.Close()
	if got := s.ConsolePath(); got != "/run/x/console" {
		t.Errorf("ConsolePath = %q", got)
	}
	s.Fail("procs/1/ctl", Errorf(syscall.ENOENT, "procs/1/ctl: start: command \"x\" not found"))
	if got := s.Err(); !strings.Contains(got, "not found") {
		t.Errorf("Err after Fail = %q", got)
	}
	if err := s.Ctl(ctx, []byte("kill")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DialGuest(ctx, hybrid.AgentPort); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("DialGuest on a dead sandbox = %v; want EBUSY", err)
	}
	if got := s.ConsolePath(); got != "/run/x/console" {
		t.Errorf("ConsolePath after death = %q; the log outlives the machine", got)
	}

	// A machine that cannot reach its guest: ENOTSUP.
	p2, _ := openPlane(t, t.TempDir(), newFakeRuntime())
	if _, err := p2.Ctl(ctx, []byte("new f")); err != nil {
		t.Fatal(err)
	}
	f, _ := p2.Lookup("f")
	if _, err := f.DialGuest(ctx, hybrid.AgentPort); !errors.Is(err, syscall.ENOTSUP) {
		t.Errorf("DialGuest without GuestDialer = %v; want ENOTSUP", err)
	}
}

// countCloser counts its Close calls.
type countCloser struct{ n atomic.Int32 }

func (c *countCloser) Close() error { c.n.Add(1); return nil }

// TestGuestLink: a sandbox keeps the link the tree made for its guest
// until it ends, then closes it (the watch records the machine's end)
// and a later call gets a new one, closed at once.
func TestGuestLink(t *testing.T) {
	rt := newFakeRuntime()
	p, _ := openPlane(t, t.TempDir(), rt)
	do(t, p, "new a")
	s := lookup(t, p, "a")
	made := 0
	mk := func() io.Closer { made++; return &countCloser{} }
	l := s.GuestLink(mk).(*countCloser)
	if again := s.GuestLink(mk); again != l || made != 1 {
		t.Fatalf("second GuestLink = %p (made %d); want the first, %p, made once", again, made, l)
	}
	v := s.Version()
	rt.machine("a").crash(errors.New("boom"))
	if _, err := s.WaitFrom(ctx(t), v); err != nil {
		t.Fatal(err)
	}
	if got := l.n.Load(); got != 1 {
		t.Errorf("link closed %d times after the machine ended; want 1", got)
	}
	l2 := s.GuestLink(mk).(*countCloser)
	if l2 == l || l2.n.Load() != 1 {
		t.Errorf("GuestLink after the end = %p closed %d times; want a new one, closed once", l2, l2.n.Load())
	}
}
