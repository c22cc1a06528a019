package ninep

import (
	"context"
	"encoding/binary"
	"io"
	iofs "io/fs"
	"net"
	"syscall"
	"testing"
	"time"

	sfs "sandfs/fs"
)

// blockFile is a file whose reads block until their context ends; every
// ended read is reported on ended.
type blockFile struct{ ended chan error }

func (f *blockFile) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{Mode: 0o444}, nil }

func (f *blockFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	return &blockHandle{f}, nil
}

type blockHandle struct{ f *blockFile }

func (h *blockHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	<-ctx.Done()
	h.f.ended <- ctx.Err()
	return 0, ctx.Err()
}
func (h *blockHandle) Write(context.Context, []byte, int64) (int, error) { return 0, syscall.EBADF }
func (h *blockHandle) Close() error                                      { return nil }

// oneDir is a directory holding one file.
type oneDir struct {
	name string
	n    sfs.Node
}

func (d oneDir) Stat(context.Context) (sfs.Attr, error) {
	return sfs.Attr{Mode: iofs.ModeDir | 0o555}, nil
}
func (d oneDir) Lookup(_ context.Context, name string) (sfs.Node, error) {
	if name == d.name {
		return d.n, nil
	}
	return nil, syscall.ENOENT
}
func (d oneDir) List(context.Context) ([]sfs.Dirent, error) { return []sfs.Dirent{{Name: d.name}}, nil }

// raw is a hand-written 9P2000.L client, for what the p9 client cannot
// send (Tflush).
type raw struct {
	t *testing.T
	c net.Conn
}

func (r *raw) send(typ uint8, tag uint16, body ...any) {
	if _, err := r.c.Write(frame(typ, tag, body...)); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next reply's type, tag and body.
func (r *raw) recv() (uint8, uint16, []byte) {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [7]byte
	if _, err := io.ReadFull(r.c, hdr[:]); err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	body := make([]byte, binary.LittleEndian.Uint32(hdr[:])-7)
	if _, err := io.ReadFull(r.c, body); err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	return hdr[4], binary.LittleEndian.Uint16(hdr[5:]), body
}

// attach negotiates msize and attaches the root as fid 1, with tag 1.
func (r *raw) attach(msize uint32) {
	r.t.Helper()
	r.send(tver, noTag, msize, "9P2000.L")
	r.expect(rver, noTag)
	r.send(tattch, 1, uint32(1), noFID, "", "", noFID)
	r.expect(rattch, 1)
}

// open attaches (fid 1) and opens the root's file name read-only as
// fid 2, with tags 1 to 3.
func (r *raw) open(msize uint32, name string) {
	r.t.Helper()
	r.attach(msize)
	r.send(twalk, 2, uint32(1), uint32(2), uint16(1), name)
	r.expect(rwalk, 2)
	r.send(tlopen, 3, uint32(2), uint32(0))
	r.expect(rlopen, 3)
}

func (r *raw) expect(typ uint8, tag uint16) []byte {
	r.t.Helper()
	gt, gtag, body := r.recv()
	if gt != typ || gtag != tag {
		r.t.Fatalf("reply type %d tag %d (body %x); want type %d tag %d", gt, gtag, body, typ, tag)
	}
	return body
}

const (
	noTag  = ^uint16(0)
	tlopen = 12
	rlopen = 13
	rlerr  = 7
	tver   = 100
	rver   = 101
	tattch = 104
	rattch = 105
	tflush = 108
	rflush = 109
	twalk  = 110
	rwalk  = 111
	tread  = 116
)

// openBlocked serves a tree with one blocking file on a pipe, opens the
// file and sends a Tread with tag 4 that blocks.
func openBlocked(t *testing.T) (*raw, *blockFile, chan struct{}) {
	f := &blockFile{ended: make(chan error, 1)}
	srv := NewServer(oneDir{"block", f}, nil)
	cc, sc := net.Pipe()
	done := make(chan struct{})
	go func() { srv.ServeConn(context.Background(), sc, ""); close(done) }()
	r := &raw{t: t, c: cc}
	r.open(8192, "block")
	r.send(tread, 4, uint32(2), uint64(0), uint32(100))
	select {
	case err := <-f.ended:
		t.Fatalf("read ended before any flush: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	return r, f, done
}

// TestFlushEndsBlockedRead: Tflush of a blocked Tread ends it (EINTR),
// then Rflush comes, as Linux's v9fs expects on a signal.
func TestFlushEndsBlockedRead(t *testing.T) {
	r, f, _ := openBlocked(t)
	defer r.c.Close()
	r.send(tflush, 5, uint16(4))
	body := r.expect(rlerr, 4)
	if e := syscall.Errno(binary.LittleEndian.Uint32(body)); e != syscall.EINTR {
		t.Errorf("flushed read: errno %v; want EINTR", e)
	}
	r.expect(rflush, 5)
	select {
	case <-f.ended:
	case <-time.After(time.Second):
		t.Error("the tree's read did not end")
	}
}

// TestConnCloseEndsBlockedRead: a client that goes away ends its reads,
// and the connection's goroutines finish.
func TestConnCloseEndsBlockedRead(t *testing.T) {
	r, f, done := openBlocked(t)
	r.c.Close()
	select {
	case <-f.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the tree's read did not end when the connection closed")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn did not return after the connection closed")
	}
}

// TestDecoder: short frames are flagged, not read past.
func TestDecoder(t *testing.T) {
	d := decoder{b: []byte{1, 0, 0, 0, 5, 0, 'a'}, ok: true}
	if v := d.u32(); v != 1 || !d.ok {
		t.Fatalf("u32 = %d, ok %v", v, d.ok)
	}
	if s := d.str(); d.ok {
		t.Errorf("str on a short buffer = %q, ok; want !ok", s)
	}
}
