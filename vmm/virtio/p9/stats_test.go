package p9

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"sandfs/vmm/virtio/virtiotest"
)

// TestHopStats: a round trip is counted in every hop of the dump, sums
// only: the notify's hand-off to the device goroutine (kicks, kickNs),
// the socket write (writeNs), the server's share and the push.
func TestHopStats(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	req := frame(tTgetattr, 4, make([]byte, 12))
	d.AddKick(0, virtiotest.R(req), virtiotest.W(200))
	recv(t, c, br)
	c.Write(frame(tRgetattr, 4, make([]byte, 150)))
	d.MustWait(0)
	line := dev.DebugState()
	m := regexp.MustCompile(`requests=(\d+) replies=(\d+) .*sentNs=(\d+) replyNs=(\d+) pushNs=(\d+) kicks=(\d+) kickNs=(\d+) writeNs=(\d+) early=\d+ attrs=\d+ files=\d+ local=\d+\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("dump %q: no hop sums", line)
	}
	for i, name := range []string{"requests", "replies", "sentNs", "replyNs", "pushNs", "kicks", "kickNs", "writeNs"} {
		if v, _ := strconv.ParseInt(m[i+1], 10, 64); v <= 0 {
			t.Errorf("%s = %d after a round trip; want > 0 (dump %q)", name, v, line)
		}
	}
	if bytes.Contains([]byte(line), []byte("avg")) {
		t.Errorf("dump %q has averages beside the sums", line)
	}
}

// TestReplyBufferReused: small replies are read into the session's one
// buffer; a frame larger than it gets its own.
func TestReplyBufferReused(t *testing.T) {
	in := append(frame(tRgetattr, 1, make([]byte, 100)), frame(tRgetattr, 2, make([]byte, 50))...)
	in = append(in, frame(tRread, 3, make([]byte, replyBufMax))...)
	br := bufio.NewReader(bytes.NewReader(in))
	buf := make([]byte, 0, replyBufMax)
	var firsts []*byte
	for range 3 {
		hb, err := br.Peek(headerLen)
		if err != nil {
			t.Fatal(err)
		}
		b, err := readBody(br, parseHeader(hb), buf)
		if err != nil {
			t.Fatal(err)
		}
		firsts = append(firsts, &b[0])
	}
	if firsts[0] != &buf[:1][0] || firsts[1] != firsts[0] {
		t.Error("small replies were not read into the session's buffer")
	}
	if firsts[2] == firsts[0] {
		t.Error("a frame past the buffer was read into it")
	}
}

// TestInlineOrder: requests the vCPU thread writes itself and those the
// socket had no room for (left to the device goroutine) reach the server
// whole and in order: 30 requests of 8000 bytes, more than the device's
// socket buffer (made small here), with the server reading only after
// all are queued.
func TestInlineOrder(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	dial := dev.cfg.Dial
	dev.cfg.Dial = func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx)
		if err == nil {
			c.(*net.UnixConn).SetWriteBuffer(16 << 10)
		}
		return c, err
	}
	c, br := version(t, d, s)
	// The device goroutine may still hold sendMu from the Tversion on a
	// loaded host, and then takes every request: wait until it lets go,
	// so that the first request is the notifying thread's to send.
	for !dev.sendMu.TryLock() {
		time.Sleep(time.Millisecond)
	}
	dev.sendMu.Unlock()
	const n = 30
	for i := range n {
		d.AddKick(0, virtiotest.R(frame(tTgetattr, uint16(i), bytes.Repeat([]byte{byte(i)}, 8000))), virtiotest.W(64))
	}
	for i := range n {
		got := recv(t, c, br)
		if h := parseHeader(got); h.tag != uint16(i) || len(got) != headerLen+8000 || got[len(got)-1] != byte(i) {
			t.Fatalf("frame %d: tag %d, %d bytes; want tag %d, %d bytes", i, h.tag, len(got), i, headerLen+8000)
		}
	}
	if in := dev.stats.inline.Load(); in == 0 || in == n {
		t.Errorf("%d of %d requests written by the notifying thread; want some, not all (the socket full)", in, n)
	}
}
