package ninep

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/hugelgupf/p9/linux"

	"sandfs/ctl/cred"
)

// interruptConn is a conn whose fids 7 and 8 are both walked to hello.
func interruptConn(t *testing.T) *conn {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	cc, sc := net.Pipe()
	t.Cleanup(func() { cc.Close() })
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	t.Cleanup(cn.cancel)
	cn.mu.Lock()
	cn.fidPaths[7], cn.fidPaths[8] = "hello", "hello"
	cn.mu.Unlock()
	return cn
}

// read shows cn a Tread of fid at off with tag and returns the offset
// its frame then carries, which p9 would hand ReadAt.
func read(cn *conn, tag uint16, fid uint32, off uint64) int64 {
	f := frame(msgTread, tag, fid, off, uint32(4096))
	cn.observe(f)
	return int64(binary.LittleEndian.Uint64(f[11:19]))
}

// begin is cn.begin of an interruptible request that must succeed and
// give back the client's offset want.
func begin(t *testing.T, cn *conn, off, want int64) context.Context {
	t.Helper()
	ctx, got, done, err := cn.begin(off, true)
	if err != nil || got != want {
		t.Fatalf("begin(%#x) = offset %d, %v; want %d", uint64(off), got, err, want)
	}
	t.Cleanup(done)
	return ctx
}

// TestFlushMatchesTag: a Tflush interrupts the one read it names, begun
// or not, never another read of the same file; the flushed read's
// handler, starting after the flush (p9 runs each on its own
// goroutine), begins interrupted, whichever read's handler starts first.
func TestFlushMatchesTag(t *testing.T) {
	cn := interruptConn(t)
	off1, off2 := read(cn, 1, 7, 100), read(cn, 2, 8, 200)
	if uint64(off1) != offsetTag|1 || uint64(off2) != offsetTag|2 {
		t.Fatalf("frames carry offsets %#x, %#x; want the tags'", uint64(off1), uint64(off2))
	}
	cn.observe(frame(msgTflush, 3, uint16(1)))
	if ctx := begin(t, cn, off2, 200); ctx.Err() != nil {
		t.Error("tag 2 began interrupted by the flush of tag 1 (another fid of the same file)")
	}
	if ctx := begin(t, cn, off1, 100); ctx.Err() == nil {
		t.Error("tag 1, flushed before its handler began, began uninterrupted")
	}

	// Begun, then flushed: its context ends at once; its twin's does not.
	off4, off5 := read(cn, 4, 7, 0), read(cn, 5, 7, 0)
	ctx4, ctx5 := begin(t, cn, off4, 0), begin(t, cn, off5, 0)
	cn.observe(frame(msgTflush, 6, uint16(5)))
	if ctx5.Err() == nil || ctx4.Err() != nil {
		t.Errorf("flush of tag 5: its context %v, tag 4's (same fid) %v; want only 5's ended", ctx5.Err(), ctx4.Err())
	}

	// A tag reused before its reply names nothing: its handler refuses.
	if _, _, _, err := cn.begin(read(cn, 4, 7, 9), true); !errors.Is(err, linux.EINVAL) {
		t.Errorf("begin of a reused tag: %v; want EINVAL", err)
	}
	for _, tag := range []uint16{1, 2, 4, 5} {
		cn.sawReply(msgTread+1, tag)
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.reads) != 0 {
		t.Errorf("%d requests left in flight after their replies", len(cn.reads))
	}
}

// TestClunkBeforeReadStarts: a clunk can be seen after a Tread's frame
// but before that read's handler has begun (the guest agent's
// TestClunkEndsBlockedRead hung on this, one run in three under load);
// the read must still be interrupted once it begins. A read of the same
// file on a fid nobody clunked is not, begun or not.
func TestClunkBeforeReadStarts(t *testing.T) {
	cn := interruptConn(t)
	off1, off2 := read(cn, 1, 7, 0), read(cn, 2, 8, 0)
	ctx2 := begin(t, cn, off2, 0)
	cn.observe(frame(msgTclunk, 3, uint32(7)))
	if ctx := begin(t, cn, off1, 0); ctx.Err() == nil {
		t.Error("a read whose fid was clunked before it began was not interrupted")
	}
	if ctx2.Err() != nil {
		t.Error("a read of another, unclunked fid of the same file was interrupted")
	}
	cn.observe(frame(msgTclunk, 4, uint32(8)))
	if ctx2.Err() == nil {
		t.Error("a begun read whose fid was clunked goes on")
	}
}

// TestXattrWriteKeepsOffset: p9 checks a Twrite's offset itself on a
// fid a Txattrcreate turned into an xattr being written, so that frame
// keeps the client's offset.
func TestXattrWriteKeepsOffset(t *testing.T) {
	cn := interruptConn(t)
	cn.observe(frame(msgTxattrcreate, 1, uint32(7), "user.x", uint64(3), uint32(0)))
	f := frame(msgTwrite, 2, uint32(7), uint64(0), uint32(0))
	cn.observe(f)
	if off := binary.LittleEndian.Uint64(f[11:19]); off != 0 {
		t.Errorf("xattr Twrite carries offset %#x; want the client's 0", off)
	}
	if off := read(cn, 3, 8, 5); uint64(off) != offsetTag|3 {
		t.Errorf("a Tread of another fid carries %#x; want its tag's", uint64(off))
	}
}
