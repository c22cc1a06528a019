package guest

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"
)

// TestClunkEndsBlockedRead: closing a file (Tclunk) while a read on it
// blocks ends that read; the process and the connection go on.
func TestClunkEndsBlockedRead(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, ctl := newProcess(t, root, "start sleep 100")
	for _, name := range []string{"stdout", "stderr", "wait"} {
		f, err := walk(t, root, "procs/"+n+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := f.ReadAt(make([]byte, 10), 0); done <- err }()
		time.Sleep(50 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("%s: read ended before the clunk: %v", name, err)
		default:
		}
		f.Close()
		select {
		case err := <-done:
			t.Logf("%s: blocked read ended with %v", name, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: blocked read did not end on clunk", name)
		}
	}
	if st := readFile(t, root, "procs/"+n+"/status"); !strings.Contains(st, "running") {
		t.Errorf("status %q", st)
	}
	mustWrite(t, ctl, "signal KILL")
	waitLine(t, root, n)
}

// 9P2000.L request types (include/net/9p/9p.h, enum p9_msg_t).
const (
	p9Tattach = 104
	p9Tflush  = 108
	p9Twalk   = 110
	p9Tread   = 116
	p9Tclunk  = 120
)

// rawConn speaks just enough 9P2000.L by hand to send Tflush, which the
// p9 client never does.
type rawConn struct {
	t *testing.T
	c net.Conn
}

func (r *rawConn) send(typ byte, tag uint16, body ...any) {
	var b []byte
	for _, x := range body {
		switch v := x.(type) {
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		case string:
			b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
			b = append(b, v...)
		}
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(7+len(b)))
	msg = append(msg, typ)
	msg = binary.LittleEndian.AppendUint16(msg, tag)
	msg = append(msg, b...)
	if _, err := r.c.Write(msg); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next reply's type and tag.
func (r *rawConn) recv() (byte, uint16) {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [7]byte
	if _, err := io.ReadFull(r.c, hdr[:]); err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	io.CopyN(io.Discard, r.c, int64(size-7))
	return hdr[4], binary.LittleEndian.Uint16(hdr[5:])
}

func (r *rawConn) expect(typ byte, tag uint16) {
	r.t.Helper()
	if gt, gtag := r.recv(); gt != typ || gtag != tag {
		r.t.Fatalf("reply type %d tag %d, want type %d tag %d", gt, gtag, typ, tag)
	}
}

func TestFlushEndsBlockedRead(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, ctl := newProcess(t, root, "start sleep 100")

	r := &rawConn{t, ts.conn()}
	const (
		rlerror  = 7
		rlopen   = 13
		rversion = 101
		rattach  = 105
		rflush   = 109
		rwalk    = 111
		rread    = 117
	)
	r.send(100, 0xffff, uint32(8192), "9P2000.L")
	r.expect(rversion, 0xffff)
	r.send(p9Tattach, 1, uint32(1), uint32(0xffffffff), "root", "", uint32(0))
	r.expect(rattach, 1)
	r.send(p9Twalk, 2, uint32(1), uint32(2), uint16(3), "procs", n, "stdout")
	r.expect(rwalk, 2)
	r.send(12, 3, uint32(2), uint32(0)) // Tlopen O_RDONLY
	r.expect(rlopen, 3)
	r.send(p9Tread, 4, uint32(2), uint64(0), uint32(100))
	time.Sleep(100 * time.Millisecond)
	r.send(p9Tflush, 5, uint16(4))
	// The read ends (EINTR), then the flush is answered.
	if typ, tag := r.recv(); tag != 4 || typ != rlerror && typ != rread {
		t.Fatalf("after Tflush: reply type %d tag %d, want the read's (tag 4)", typ, tag)
	}
	r.expect(rflush, 5)
	// The fid still works: a new read blocks until data, and the
	// connection serves other requests meanwhile.
	r.send(p9Tclunk, 6, uint32(2))
	r.expect(121, 6) // Rclunk

	mustWrite(t, ctl, "signal KILL")
	waitLine(t, root, n)
}

// TestClunkEndsBlockedWrite: a stdin write blocked on a full pipe (the
// process does not read) ends when the file is closed, with a short count.
func TestClunkEndsBlockedWrite(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, ctl := newProcess(t, root, "start sleep 100")
	f, err := walk(t, root, "procs/"+n+"/stdin")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Open(p9.WriteOnly); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		big := make([]byte, 200<<10) // more than a pipe holds
		var err error
		for err == nil {
			_, err = f.WriteAt(big, 0)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("stdin write ended before the clunk: %v", err)
	default:
	}
	f.Close()
	select {
	case err := <-done:
		t.Logf("blocked write ended with %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("stdin write blocked on a full pipe did not end on clunk")
	}
	mustWrite(t, ctl, "signal KILL")
	waitLine(t, root, n)
}

// TestClunkOfOtherFidKeepsRead: a lookup of a file beside a read blocked
// on it (a walk, a stat, a clunk of that other fid, on the same
// connection) does not end the read: it still gets the output.
func TestClunkOfOtherFidKeepsRead(t *testing.T) {
	ts := newTestServer(t, Options{})
	_, root := ts.dial()
	n, _ := newProcess(t, root, "exec 'read x; echo got $x'")
	out := openFile(t, root, "procs/"+n+"/stdout", p9.ReadOnly)
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		k, err := out.ReadAt(b, 0)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:k])
	}()
	time.Sleep(100 * time.Millisecond) // let the read block
	f, err := walk(t, root, "procs/"+n+"/stdout")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := f.GetAttr(p9.AttrMaskAll); err != nil {
		t.Fatal(err)
	}
	f.Close()
	time.Sleep(100 * time.Millisecond) // past ninep's interrupt grace
	in := openFile(t, root, "procs/"+n+"/stdin", p9.WriteOnly)
	mustWrite(t, in, "a\n")
	select {
	case s := <-got:
		if s != "got a\n" {
			t.Errorf("blocked read gave %q; want %q", s, "got a\n")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("read did not end")
	}
	waitLine(t, root, n)
}
