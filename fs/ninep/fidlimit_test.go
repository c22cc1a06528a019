package ninep

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"testing"

	"sandfs/ctl/cred"
	"sandfs/test/syncbuf"
)

const (
	tclunk = 120
	rclunk = 121
)

// TestFidBounds: past its bound on fids, a connection's walks and
// attaches get EMFILE and its open fids stay usable; a walk that only
// replaces a fid it holds passes; a clunk makes room. Past its bound on
// open fids, a Tlopen gets EMFILE until one is clunked. Other refusals
// keep their own errno, and the log says why.
func TestFidBounds(t *testing.T) {
	log := &syncbuf.Buffer{}
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, slog.New(slog.NewTextHandler(log, nil)))
	srv.lim.fids = 4
	for _, bad := range []int{0, -1, MaxOpenBound + 1} {
		if err := srv.SetOpenBound(bad); err == nil {
			t.Errorf("SetOpenBound(%d) = nil; want an error", bad)
		}
	}
	if srv.lim.opens != defaultOpens {
		t.Fatalf("after refused SetOpenBounds the bound is %d; want the default %d", srv.lim.opens, defaultOpens)
	}
	if err := srv.SetOpenBound(2); err != nil {
		t.Fatal(err)
	}
	cc, sc := net.Pipe()
	done := make(chan struct{})
	go func() { srv.ServeConn(context.Background(), sc, ""); close(done) }()
	defer func() { cc.Close(); <-done }()
	r := &raw{t: t, c: cc}
	r.attach(8192)

	walk := func(newfid uint32) (uint8, uint32) {
		t.Helper()
		r.send(twalk, 2, uint32(1), newfid, uint16(1), "hello")
		return reply(r, 2)
	}
	for fid := uint32(2); fid <= 4; fid++ {
		if typ, e := walk(fid); typ != rwalk {
			t.Fatalf("walk to fid %d (of 4) = type %d errno %d; want Rwalk", fid, typ, e)
		}
	}
	if typ, e := walk(5); typ != rlerr || e != 24 {
		t.Errorf("fifth fid's walk = type %d errno %d; want Rlerror EMFILE (24)", typ, e)
	}
	r.send(tattch, 3, uint32(6), noFID, "", "", noFID)
	if typ, e := reply(r, 3); typ != rlerr || e != 24 {
		t.Errorf("attach past the bound = type %d errno %d; want Rlerror EMFILE", typ, e)
	}
	if typ, e := walk(4); typ != rwalk {
		t.Errorf("walk onto fid 4, held = type %d errno %d; want Rwalk", typ, e)
	}
	r.send(twalk, 4, uint32(77), uint32(78), uint16(0))
	if typ, e := reply(r, 4); typ != rlerr || e != 9 {
		t.Errorf("walk from a fid never made = type %d errno %d; want its own EBADF (9)", typ, e)
	}

	open := func(fid uint32) (uint8, uint32) {
		t.Helper()
		r.send(tlopen, 5, fid, uint32(0))
		return reply(r, 5)
	}
	for _, fid := range []uint32{2, 3} {
		if typ, e := open(fid); typ != rlopen {
			t.Fatalf("open fid %d (of 2) = type %d errno %d; want Rlopen", fid, typ, e)
		}
	}
	if typ, e := open(4); typ != rlerr || e != 24 {
		t.Errorf("third open = type %d errno %d; want Rlerror EMFILE", typ, e)
	}
	// The open fids still read.
	r.send(tread, 6, uint32(2), uint64(0), uint32(100))
	if body := r.expect(tread+1, 6); string(body[4:]) != "hi\n" {
		t.Errorf("read of an open fid at the bound = %q; want \"hi\\n\"", body[4:])
	}
	r.send(tclunk, 7, uint32(2))
	r.expect(rclunk, 7)
	if typ, e := open(4); typ != rlopen {
		t.Errorf("open after a clunk = type %d errno %d; want Rlopen", typ, e)
	}
	if typ, e := walk(5); typ != rwalk {
		t.Errorf("walk after a clunk = type %d errno %d; want Rwalk", typ, e)
	}
	if typ, _ := walk(6); typ != rlerr {
		t.Errorf("walk past the bound again = type %d; want Rlerror", typ)
	}
	for _, want := range []string{"as many fids as it may", "as many open fids as it may", "limit=4", "limit=2"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log has no %q:\n%s", want, log)
		}
	}
}

// reply reads the reply with tag and returns its type and, for an
// Rlerror, its errno.
func reply(r *raw, tag uint16) (uint8, uint32) {
	r.t.Helper()
	typ, got, body := r.recv()
	if got != tag {
		r.t.Fatalf("reply tag %d; want %d", got, tag)
	}
	if typ == rlerr && len(body) == 4 {
		return typ, binary.LittleEndian.Uint32(body)
	}
	return typ, 0
}

// TestUserBudget: the connections one unprivileged user opens to the
// socket share one budget of fids and open fids, so more connections do
// not buy more: past it a walk or open on any of them gets EMFILE, and a
// connection's end gives its part back. Connections served as someone
// the caller vouches for (a guest's world) are not counted.
func TestUserBudget(t *testing.T) {
	log := &syncbuf.Buffer{}
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, slog.New(slog.NewTextHandler(log, nil)))
	srv.lim.fids, srv.lim.opens = 4, 2
	// dial connects, as someone the caller vouches for or as the
	// socket's peer, without attaching.
	dial := func(vouched bool) (*raw, func()) {
		cc, sc := net.Pipe()
		done := make(chan struct{})
		go func() {
			if vouched {
				srv.ServeConnAs(context.Background(), sc, cred.Nobody)
			} else {
				srv.ServeConn(context.Background(), sc, "") // a pipe: nobody
			}
			close(done)
		}()
		return &raw{t: t, c: cc}, func() { cc.Close(); <-done }
	}
	walk := func(r *raw, newfid uint32) (uint8, uint32) {
		t.Helper()
		r.send(twalk, 2, uint32(1), newfid, uint16(1), "hello")
		return reply(r, 2)
	}
	open := func(r *raw, fid uint32) (uint8, uint32) {
		t.Helper()
		r.send(tlopen, 5, fid, uint32(0))
		return reply(r, 5)
	}

	a, endA := dial(false)
	a.attach(8192) // fid 1
	if typ, e := walk(a, 2); typ != rwalk {
		t.Fatalf("a's walk = type %d errno %d", typ, e)
	}
	if typ, e := open(a, 2); typ != rlopen {
		t.Fatalf("a's open = type %d errno %d", typ, e)
	}
	b, endB := dial(false)
	defer endB()
	b.attach(8192) // fid 1: the user's third
	if typ, e := walk(b, 2); typ != rwalk {
		t.Fatalf("b's walk to the user's fourth fid = type %d errno %d", typ, e)
	}
	if typ, e := open(b, 2); typ != rlopen {
		t.Fatalf("b's open, the user's second = type %d errno %d", typ, e)
	}
	if typ, e := walk(b, 3); typ != rlerr || e != 24 {
		t.Errorf("b's walk to the user's fifth fid = type %d errno %d; want Rlerror EMFILE", typ, e)
	}
	if typ, e := open(b, 1); typ != rlerr || e != 24 {
		t.Errorf("b's second open, the user's third = type %d errno %d; want Rlerror EMFILE", typ, e)
	}
	// A third connection's attach would be the user's fifth fid.
	r3, end3 := dial(false)
	r3.send(tver, noTag, uint32(8192), "9P2000.L")
	r3.expect(rver, noTag)
	r3.send(tattch, 1, uint32(1), noFID, "", "", noFID)
	if typ, e := reply(r3, 1); typ != rlerr || e != 24 {
		t.Errorf("a third connection's attach = type %d errno %d; want Rlerror EMFILE", typ, e)
	}
	end3()
	c, endC := dial(true) // vouched for: its own bounds only
	defer endC()
	c.attach(8192)
	if typ, e := walk(c, 2); typ != rwalk {
		t.Errorf("a vouched-for connection's walk = type %d errno %d; want Rwalk", typ, e)
	}
	if typ, e := open(c, 2); typ != rlopen {
		t.Errorf("a vouched-for connection's open = type %d errno %d; want Rlopen", typ, e)
	}
	endA() // gives back 2 fids, 1 open
	if typ, e := walk(b, 3); typ != rwalk {
		t.Errorf("b's walk after a ended = type %d errno %d; want Rwalk", typ, e)
	}
	if typ, e := open(b, 1); typ != rlopen {
		t.Errorf("b's second open after a ended = type %d errno %d; want Rlopen", typ, e)
	}
	for _, want := range []string{"uid 65534's connections hold as many fids as they may", "uid 65534's connections hold as many open fids as they may"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log has no %q:\n%s", want, log)
		}
	}
}
