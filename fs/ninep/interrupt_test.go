package ninep

import (
	"context"
	"net"
	"testing"
	"time"

	"sandfs/ctl/cred"
)

// TestClunkBeforeReadStarts: p9 runs each request's handler on its own
// goroutine, so a clunk can be seen after a Tread's frame but before that
// read's handler has registered; the read must still be interrupted once
// it starts (the guest agent's TestClunkEndsBlockedRead hung on this, one
// run in three under load). A read of the same file on a fid nobody
// clunked is not.
func TestClunkBeforeReadStarts(t *testing.T) {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	cc, sc := net.Pipe()
	defer cc.Close()
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	defer cn.cancel()
	cn.mu.Lock()
	cn.fidPaths[7], cn.fidPaths[8] = "hello", "hello"
	cn.mu.Unlock()

	cn.sawRead(1, 7)
	cn.sawClunk(7)
	ctx, done := cn.startRead("hello")
	defer done()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a read whose fid was clunked before it started was not interrupted")
	}
	cn.sawReply(msgTread+1, 1)

	cn.sawRead(2, 8)
	ctx2, done2 := cn.startRead("hello")
	defer done2()
	select {
	case <-ctx2.Done():
		t.Fatal("a read of another, unclunked fid was interrupted")
	case <-time.After(10 * interruptGrace):
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.unstarted) != 0 {
		t.Errorf("%d reads left noted as unstarted", len(cn.unstarted))
	}
}
