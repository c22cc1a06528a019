package ctl

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// vsockServer listens on a unix socket and answers each CONNECT line
// with reply (or closes the connection when reply is ""), then sends
// "9P..." as the guest's first bytes.
func vsockServer(t *testing.T, reply string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "v.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 64)
				n, _ := c.Read(b)
				if string(b[:n]) != "CONNECT 564\n" || reply == "" {
					return
				}
				io.WriteString(c, reply+"9P-bytes")
				time.Sleep(time.Second)
			}()
		}
	}()
	return sock
}

func TestDialVsock(t *testing.T) {
	ctx := context.Background()
	c, err := DialVsock(ctx, vsockServer(t, "OK 1073741824\n"), GuestPort)
	if err != nil {
		t.Fatalf("DialVsock = %v", err)
	}
	b := make([]byte, 8)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "9P-bytes" {
		t.Errorf("first guest bytes = %q, %v; the handshake must not consume them", b, err)
	}
	c.Close()
	for _, reply := range []string{"", "NO\n", "OK\n", "OK x\n"} {
		_, err := DialVsock(ctx, vsockServer(t, reply), GuestPort)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("DialVsock with reply %q = %v; want ECONNREFUSED", reply, err)
		}
	}
	// A VMM that never answers: the context's deadline ends the wait.
	sock := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := DialVsock(dctx, sock, GuestPort); Errno(err) != syscall.ETIMEDOUT {
		t.Errorf("DialVsock to a mute socket = %v (%v); want ETIMEDOUT", err, Errno(err))
	}
}

// guestMachine is a fakeMachine that can reach a guest.
type guestMachine struct {
	*fakeMachine
	sock string
}

func (m *guestMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	return DialVsock(ctx, m.sock, port)
}

func (m *guestMachine) ConsolePath() string { return "/run/x/console" }

type guestRuntime struct{ sock string }

func (r guestRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	return &guestMachine{fakeMachine: &fakeMachine{done: make(chan struct{})}, sock: r.sock}, nil
}

func TestSandboxDialGuest(t *testing.T) {
	ctx := context.Background()
	p, _ := openPlane(t, t.TempDir(), guestRuntime{sock: vsockServer(t, "OK 7\n")})
	if _, err := p.Ctl(ctx, []byte("new g")); err != nil {
		t.Fatal(err)
	}
	s, _ := p.Lookup("g")
	c, err := s.DialGuest(ctx, GuestPort)
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
	if _, err := s.DialGuest(ctx, GuestPort); !errors.Is(err, syscall.EBUSY) {
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
	if _, err := f.DialGuest(ctx, GuestPort); !errors.Is(err, syscall.ENOTSUP) {
		t.Errorf("DialGuest without GuestDialer = %v; want ENOTSUP", err)
	}
}
