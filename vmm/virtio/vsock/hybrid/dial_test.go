package hybrid

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
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

func TestDial(t *testing.T) {
	ctx := context.Background()
	c, err := Dial(ctx, vsockServer(t, "OK 1073741824\n"), AgentPort)
	if err != nil {
		t.Fatalf("Dial = %v", err)
	}
	b := make([]byte, 8)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "9P-bytes" {
		t.Errorf("first guest bytes = %q, %v; the handshake must not consume them", b, err)
	}
	c.Close()
	for _, reply := range []string{"", "NO\n", "OK\n", "OK x\n"} {
		_, err := Dial(ctx, vsockServer(t, reply), AgentPort)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Dial with reply %q = %v; want ECONNREFUSED", reply, err)
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
	if _, err := Dial(dctx, sock, AgentPort); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("Dial to a mute socket = %v; want ETIMEDOUT", err)
	}
}

// cancelAtReply is a client conn whose context ends as the VMM's reply
// line is read, before the handshake can see it done; pastDeadline is
// closed when a deadline in the past is set on it (the context's
// AfterFunc).
type cancelAtReply struct {
	net.Conn
	cancel       context.CancelFunc
	pastDeadline chan struct{}
	once         sync.Once
}

func (c *cancelAtReply) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && b[n-1] == '\n' {
		c.cancel()
	}
	return n, err
}

func (c *cancelAtReply) SetDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		defer c.once.Do(func() { close(c.pastDeadline) })
	}
	return c.Conn.SetDeadline(t)
}

// TestHandshakeContextEnds: a context that ends as the reply arrives
// fails the handshake; handing out the conn would let the context's
// AfterFunc set a past deadline on it later, failing the session's next
// read or write.
func TestHandshakeContextEnds(t *testing.T) {
	cli, srv := net.Pipe()
	defer srv.Close()
	go func() {
		b := make([]byte, len("CONNECT 564\n"))
		if _, err := io.ReadFull(srv, b); err != nil {
			return
		}
		io.WriteString(srv, "OK 1073741824\n")
		io.Copy(srv, srv) // echo the session
	}()
	ctx, cancel := context.WithCancel(context.Background())
	c := &cancelAtReply{Conn: cli, cancel: cancel, pastDeadline: make(chan struct{})}
	defer c.Close()
	err := handshake(ctx, c, AgentPort)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("handshake = %v; want context.Canceled", err)
		}
		return
	}
	// Handed out: the session must work once the AfterFunc has run.
	select {
	case <-c.pastDeadline:
	case <-time.After(5 * time.Second):
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatalf("handshake = nil, then the session's first write: %v", err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("handshake = nil, then the session's first read: %v", err)
	}
}
