package ctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm/virtio/vsock/hybrid"
)

// fakeAgent is a VMM's hybrid vsock socket whose guest answers
// hybrid.CtlPort's exchange with reply ("": refuses the port) and
// refuses every other port; it records the ports asked and the lines
// sent.
type fakeAgent struct {
	mu    sync.Mutex
	ports []string
	lines []string
}

func (a *fakeAgent) serve(t *testing.T, reply string) string {
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
				r := bufio.NewReader(c)
				connect, _ := r.ReadString('\n')
				a.mu.Lock()
				a.ports = append(a.ports, strings.TrimSpace(connect))
				a.mu.Unlock()
				if connect != fmt.Sprintf("CONNECT %d\n", hybrid.CtlPort) || reply == "" {
					return // refused
				}
				fmt.Fprintf(c, "OK 1\n")
				for {
					line, err := r.ReadString('\n')
					if err != nil || line == "\n" {
						break
					}
					a.mu.Lock()
					a.lines = append(a.lines, strings.TrimSuffix(line, "\n"))
					a.mu.Unlock()
				}
				if reply == "hang" {
					time.Sleep(5 * time.Second)
				}
				fmt.Fprint(c, reply)
			}()
		}
	}()
	return sock
}

// TestRefreshGuestLines: a restored guest's refresh is one exchange on
// the agent's ctl-lines port: entropy (64 bytes), hostname, then the
// clock; its answer maps to the error (errno and text); an agent without
// the port is refreshed through 9P on the agent's port instead.
func TestRefreshGuestLines(t *testing.T) {
	now := func() time.Time { return time.Unix(1700000000, 5) }
	ctx := context.Background()
	a := &fakeAgent{}
	if via, err := refreshGuest(ctx, a.serve(t, "ok\n"), "box1", now); err != nil || via != refreshLines {
		t.Fatalf("refreshGuest = %s, %v; want through %s", via, err, refreshLines)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.lines) != 3 || len(strings.TrimPrefix(a.lines[0], "entropy ")) != 128 ||
		a.lines[1] != "hostname box1" || a.lines[2] != "time 1700000000000000005" {
		t.Errorf("lines sent %q; want entropy of 64 bytes, hostname box1, time 1700000000000000005", a.lines)
	}
	for _, tc := range []struct {
		reply string
		errno syscall.Errno
		text  string
	}{
		{"error 22 time: want unix nanoseconds\n", syscall.EINVAL, "agent: time: want unix nanoseconds"},
		{"error 111 odd\n", syscall.EIO, "agent: odd"}, // never "no such port"
		{"what\n", syscall.EIO, `bad answer "what"`},
		{"error x y\n", syscall.EIO, "bad answer"},
		{"ok", syscall.EIO, "no answer"}, // no newline: the connection ended
	} {
		_, err := refreshGuest(ctx, (&fakeAgent{}).serve(t, tc.reply), "box1", now)
		if Errno(err) != tc.errno || err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("answer %q: refreshGuest = %v (%v); want %v, %q", tc.reply, err, Errno(err), tc.errno, tc.text)
		}
	}
	// A guest that takes the messages and never answers holds the
	// refresh only until its context ends.
	hctx, hcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer hcancel()
	t0 := time.Now()
	if _, err := refreshGuest(hctx, (&fakeAgent{}).serve(t, "hang"), "box1", now); err == nil || time.Since(t0) > 2*time.Second {
		t.Errorf("a guest that never answers: refreshGuest = %v after %v; want an error at the deadline", err, time.Since(t0))
	}
	// No ctl-lines port: the agent's 9P port is asked next (refused here
	// too, until the deadline).
	b := &fakeAgent{}
	sock := b.serve(t, "")
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	via, err := refreshGuest(tctx, sock, "box1", now)
	b.mu.Lock()
	defer b.mu.Unlock()
	if via != refresh9P || !errors.Is(err, syscall.ETIMEDOUT) || len(b.ports) < 2 || b.ports[0] != fmt.Sprintf("CONNECT %d", hybrid.CtlPort) || b.ports[1] != fmt.Sprintf("CONNECT %d", hybrid.AgentPort) {
		t.Errorf("without the port: %v, ports asked %q; want ETIMEDOUT after asking %d, then %d", err, b.ports, hybrid.CtlPort, hybrid.AgentPort)
	}
}
