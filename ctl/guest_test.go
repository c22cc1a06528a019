package ctl

import (
	"context"
	"errors"
	"net"
	"strings"
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
