package ctl

import (
	"io"
	"net"
	"path/filepath"
	"testing"
)

// TestGuestConnsBounded: a guest connecting to its world's port over and
// over gets at most max sessions at a time; one over is closed unserved,
// and a slot comes back when a session ends.
func TestGuestConnsBounded(t *testing.T) {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "w_565"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const max = 2
	go serveGuestConns(l, max, func(c net.Conn) {
		defer c.Close()
		c.Write([]byte("s")) // served
		io.Copy(io.Discard, c)
	})
	dial := func() (net.Conn, string) {
		c, err := net.Dial("unix", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		n, _ := c.Read(b)
		return c, string(b[:n])
	}
	var held []net.Conn
	for i := 0; i < max; i++ {
		c, got := dial()
		if got != "s" {
			t.Fatalf("connection %d: %q; want served", i, got)
		}
		held = append(held, c)
	}
	for i := 0; i < 3; i++ {
		c, got := dial()
		c.Close()
		if got != "" {
			t.Fatalf("connection over %d: served; want closed", max)
		}
	}
	held[0].Close()
	for {
		c, got := dial() // the slot comes back once the session has ended
		if got == "s" {
			c.Close()
			break
		}
		c.Close()
	}
	for _, c := range held[1:] {
		c.Close()
	}
}
