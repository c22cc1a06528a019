package vmmproc

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sandfs/vmm"
)

// TestLostConnectionIsTheEnd: a control request whose connection the VMM
// drops as it ends (a guest reset during a launch) fails with the
// process's end, learnt after the request failed (the reaper waits for
// the process and its log first), not with the lost connection.
func TestLostConnectionIsTheEnd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "vmm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // the VMM going away
		}
	}()
	p := &Process{exited: make(chan struct{}), done: make(chan struct{})}
	p.sess = newSession(sock, p.check)
	defer p.sess.close()
	reaped := 300 * time.Millisecond // as the 180 ms seen in a loaded lab, and more
	time.AfterFunc(reaped, func() { p.reason = vmm.ExitReset; close(p.exited) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = p.Status(ctx)
	if !errors.Is(err, vmm.ErrEnded) || !strings.Contains(err.Error(), "(reset)") {
		t.Fatalf("Status = %v; want the machine's end (reset)", err)
	}
	if d := time.Since(start); d > endGrace {
		t.Errorf("Status took %v; the end was known after %v", d, reaped)
	}
}
