package p9

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm/virtio/virtiotest"
)

// tclone is a Twalk of no names from fid to newfid.
func tclone(tag uint16, fid, newfid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, fid)
	b = binary.LittleEndian.AppendUint32(b, newfid)
	return frame(tTwalk, tag, binary.LittleEndian.AppendUint16(b, 0))
}

// tfid is a request of type typ whose body is fid alone.
func tfid(typ uint8, tag uint16, fid uint32) []byte {
	return frame(typ, tag, binary.LittleEndian.AppendUint32(nil, fid))
}

// TestEarlyClone: with the server's agreement a clone is answered at
// once and reaches the server under the device's tag; the guest's open
// of the new fid follows it and gets the server's reply.
func TestEarlyClone(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	h := d.AddKick(0, virtiotest.R(tclone(2, 1, 5)), virtiotest.W(64))
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, rwalkNone(2)) {
		t.Fatalf("used %d %x, want an Rwalk of no qids for tag 2", u.ID, u.Out)
	}
	if got := recv(t, c, br); !bytes.Equal(got, tclone(earlyTagBase, 1, 5)) {
		t.Fatalf("server got %x, want the clone under the device's tag", got)
	}
	open := tfid(12, 2, 5)
	h2 := d.AddKick(0, virtiotest.R(open), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, open) {
		t.Fatalf("server got %x, want the open", got)
	}
	c.Write(rwalkNone(earlyTagBase))
	rl := frame(13, 2, make([]byte, 17))
	c.Write(rl)
	if u := d.MustWait(0); u.ID != h2 || !bytes.Equal(u.Out, rl) {
		t.Fatalf("used %d %x, want the server's Rlopen", u.ID, u.Out)
	}
}

// TestEarlyCloneFails: a clone the server refuses (EMFILE) after the
// device answered it: the open already sent gets EMFILE in place of the
// server's EBADF, a later request on the fid gets it at once, its clunk
// is answered and not sent, and a new clone to the fid number is early
// again.
func TestEarlyCloneFails(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	d.AddKick(0, virtiotest.R(tclone(2, 1, 5)), virtiotest.W(64))
	d.MustWait(0)
	recv(t, c, br)
	d.AddKick(0, virtiotest.R(tfid(12, 3, 5)), virtiotest.W(64))
	recv(t, c, br)
	c.Write(rlerror(earlyTagBase, syscall.EMFILE))
	c.Write(rlerror(3, syscall.EBADF))
	wantErrno(t, d.MustWait(0), 3, syscall.EMFILE)
	d.AddKick(0, virtiotest.R(tfid(tTgetattr, 4, 5)), virtiotest.W(64))
	wantErrno(t, d.MustWait(0), 4, syscall.EMFILE)
	d.AddKick(0, virtiotest.R(tclunk(6, 5)), virtiotest.W(64))
	if u := d.MustWait(0); !bytes.Equal(u.Out, rclunk(6)) {
		t.Fatalf("clunk of the failed fid: used %x, want Rclunk", u.Out)
	}
	d.AddKick(0, virtiotest.R(tclone(7, 1, 5)), virtiotest.W(64))
	if u := d.MustWait(0); !bytes.Equal(u.Out, rwalkNone(7)) {
		t.Fatalf("a new clone: used %x, want an early Rwalk", u.Out)
	}
	// Neither the getattr nor the clunk reached the server: the next
	// frame it reads is the new clone.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got := recv(t, c, br); !bytes.Equal(got, tclone(earlyTagBase, 1, 5)) {
		t.Fatalf("server got %x, want the new clone", got)
	}
}
