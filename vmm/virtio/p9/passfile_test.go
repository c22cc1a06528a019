package p9

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"sandfs/vmm/virtio/virtiotest"
)

// rlopenfd is the server's Rlopenfd frame for tag: reply type rtype,
// qid byte q, iounit.
func rlopenfd(tag uint16, rtype uint8, q byte, iounit uint32) []byte {
	body := append([]byte{rtype}, bytes.Repeat([]byte{q}, qidLen)...)
	return frame(tRlopenfd, tag, binary.LittleEndian.AppendUint32(body, iounit))
}

// ioReq is a Tread or Twrite body: fid, offset, count, data.
func ioReq(fid uint32, off uint64, count uint32, data []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, fid)
	b = binary.LittleEndian.AppendUint64(b, off)
	return append(binary.LittleEndian.AppendUint32(b, count), data...)
}

// TestPassedFile: an open answered with Rlopenfd reaches the guest as
// the Rlopen (or Rlcreate) it stands for; the fid's reads, writes
// (small, and large from guest memory) and fsyncs are then answered by
// the device on the descriptor, none reaching the server; the clunk
// goes to the server and ends that: the fid's next read is the
// server's again.
func TestPassedFile(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	tlopen := frame(tTlopen, 1, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 7), uint32(os.O_RDWR)))
	d.AddKick(0, virtiotest.R(tlopen), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, tlopen) {
		t.Fatalf("server got %x, want the Tlopen %x", got, tlopen)
	}
	sendFD(t, c, rlopenfd(1, tRlopen, 0xaa, 4096), int(f.Fd()))
	want := frame(tRlopen, 1, binary.LittleEndian.AppendUint32(bytes.Repeat([]byte{0xaa}, qidLen), 4096))
	if u := d.MustWait(0); !bytes.Equal(u.Out, want) {
		t.Fatalf("guest got %x, want the Rlopen %x", u.Out, want)
	}

	d.AddKick(0, virtiotest.R(frame(tTwrite, 2, ioReq(7, 3, 5, []byte("hello")))), virtiotest.W(64))
	if u := d.MustWait(0); !bytes.Equal(u.Out, frame(tRwrite, 2, []byte{5, 0, 0, 0})) {
		t.Fatalf("Twrite: guest got %x, want Rwrite of 5", u.Out)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 2<<10) // 32 KiB: from guest memory (directMin)
	d.AddKick(0, virtiotest.R(frame(tTwrite, 3, ioReq(7, 8, uint32(len(large)), large))), virtiotest.W(64))
	if u := d.MustWait(0); !bytes.Equal(u.Out, frame(tRwrite, 3, binary.LittleEndian.AppendUint32(nil, uint32(len(large))))) {
		t.Fatalf("large Twrite: guest got %x", u.Out)
	}
	d.AddKick(0, virtiotest.R(frame(tTread, 4, ioReq(7, 0, 12, nil))), virtiotest.W(5), virtiotest.W(100))
	if u := d.MustWait(0); !bytes.Equal(u.Out, frame(tRread, 4, append([]byte{12, 0, 0, 0}, "\x00\x00\x00hello0123"...))) {
		t.Fatalf("Tread: guest got %q", u.Out)
	}
	d.AddKick(0, virtiotest.R(frame(tTfsync, 5, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 7), 0))), virtiotest.W(64))
	if u := d.MustWait(0); !bytes.Equal(u.Out, frame(tRfsync, 5, nil)) {
		t.Fatalf("Tfsync: guest got %x", u.Out)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, append([]byte("\x00\x00\x00hello"), large...)) {
		t.Fatalf("file holds %d bytes (%v), want the two writes", len(got), err)
	}
	if n := dev.stats.local.Load(); n != 4 {
		t.Errorf("%d local requests counted, want 4", n)
	}

	clunk := tclunk(6, 7)
	d.AddKick(0, virtiotest.R(clunk), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, clunk) {
		t.Fatalf("server's next frame %x, want the Tclunk %x (nothing of the fid's I/O)", got, clunk)
	}
	c.Write(frame(tRclunk, 6, nil))
	d.MustWait(0)
	dev.mu.Lock()
	n := len(dev.files)
	dev.mu.Unlock()
	if n != 0 {
		t.Errorf("%d passed files kept after the clunk", n)
	}
	tread := frame(tTread, 7, ioReq(7, 0, 12, nil))
	d.AddKick(0, virtiotest.R(tread), virtiotest.W(100))
	if got := recv(t, c, br); !bytes.Equal(got, tread) {
		t.Fatalf("after the clunk the server got %x, want the Tread", got)
	}
	c.Write(rlerror(7, syscall.EBADF))
	wantErrno(t, d.MustWait(0), 7, syscall.EBADF)
}

// TestPassedCreate: an Rlopenfd standing for an Rlcreate reaches the
// guest as one, and the created fid's writes stay local; a descriptor
// opened read-only refuses a write with the kernel's EBADF.
func TestPassedCreate(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	body := binary.LittleEndian.AppendUint32(nil, 9)
	body = append(binary.LittleEndian.AppendUint16(body, 1), 'n')
	body = append(body, make([]byte, 12)...) // flags, mode, gid
	d.AddKick(0, virtiotest.R(frame(tTlcreate, 1, body)), virtiotest.W(64))
	recv(t, c, br)
	sendFD(t, c, rlopenfd(1, tRlcreate, 0xbb, 0), int(f.Fd()))
	if u := d.MustWait(0); !bytes.Equal(u.Out, frame(tRlcreate, 1, append(bytes.Repeat([]byte{0xbb}, qidLen), 0, 0, 0, 0))) {
		t.Fatalf("guest got %x, want the Rlcreate", u.Out)
	}
	d.AddKick(0, virtiotest.R(frame(tTwrite, 2, ioReq(9, 0, 1, []byte("y")))), virtiotest.W(64))
	wantErrno(t, d.MustWait(0), 2, syscall.EBADF)

	// A bad Rlopenfd (no descriptor) ends the session.
	d.AddKick(0, virtiotest.R(frame(tTlopen, 3, make([]byte, 8))), virtiotest.W(64))
	recv(t, c, br)
	c.Write(rlopenfd(3, tRlopen, 0, 0))
	wantErrno(t, d.MustWait(0), 3, syscall.EIO)
}
