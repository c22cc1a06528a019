package hybrid

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
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
