package uds

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLongPath: a socket whose path is longer than a sockaddr_un holds
// is bound, reached and, when its listener closes, removed; a short one
// the same.
func TestLongPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		sub  string
	}{
		{"short", "s"},
		{"long", strings.Repeat("d", 60) + "/" + strings.Repeat("e", 60)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.sub)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "vsock.sock_565")
			if tc.name == "long" && len(path) <= MaxPath {
				t.Fatalf("path %d bytes: not longer than a sockaddr_un holds", len(path))
			}
			os.WriteFile(path, nil, 0o600) // a stale file: replaced
			l, err := Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				c, err := l.Accept()
				if err == nil {
					c.Write([]byte("hi"))
					c.Close()
				}
			}()
			c, err := Dial(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(c)
			c.Close()
			if string(b) != "hi" {
				t.Errorf("read %q through the socket, want hi", b)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
				t.Errorf("the socket file: %v, %v", fi, err)
			}
			l.Close()
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("after Close the socket file is still there: %v", err)
			}
			if _, err := Dial(context.Background(), path); err == nil {
				t.Error("dial after Close succeeded")
			}
		})
	}
}

// TestLongName: a last element too long for even the short form is
// ENAMETOOLONG, and a missing directory ENOENT.
func TestLongName(t *testing.T) {
	if _, err := Listen(filepath.Join(t.TempDir(), strings.Repeat("n", 100))); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("Listen with a 100-byte name = %v, want ENAMETOOLONG", err)
	}
	long := filepath.Join(t.TempDir(), strings.Repeat("m", 120), "x.sock")
	if _, err := Dial(context.Background(), long); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Dial under a missing directory = %v, want ENOENT", err)
	}
}
