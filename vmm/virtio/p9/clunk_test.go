package p9

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"sandfs/vmm/virtio/virtiotest"
)

func tclunk(tag uint16, fid uint32) []byte {
	return frame(tTclunk, tag, binary.LittleEndian.AppendUint32(nil, fid))
}

// TestEarlyClunk: with the server's agreement, a Tclunk is answered at
// once and reaches the server under the device's own tag, the guest
// reuses its tag and fid at once, the server's Rclunk to the device's
// tag touches no chain, and a save holds no chain for it.
func TestEarlyClunk(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	h := d.AddKick(0, virtiotest.R(tclunk(3, 9)), virtiotest.W(64))
	u := d.MustWait(0) // before the server has even read it
	if u.ID != h || !bytes.Equal(u.Out, rclunk(3)) {
		t.Fatalf("used %d %x, want Rclunk tag 3 on %d", u.ID, u.Out, h)
	}
	if got, want := recv(t, c, br), tclunk(earlyTagBase, 9); !bytes.Equal(got, want) {
		t.Fatalf("server got %x, want %x", got, want)
	}
	walk := frame(tTwalk, 3, []byte{1, 0, 0, 0, 9, 0, 0, 0, 0, 0}) // fid 1, newfid 9, no names
	h2 := d.AddKick(0, virtiotest.R(walk), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, walk) {
		t.Fatalf("server got %x, want the walk %x", got, walk)
	}
	dev.Transport().Pause()
	if st := dev.Save(); len(st.Held) != 1 || st.Held[0].Tag != 3 {
		t.Fatalf("saved held chains %+v, want the walk's alone", st.Held)
	}
	dev.Transport().Resume()
	c.Write(rclunk(earlyTagBase))
	rw := frame(tTwalk+1, 3, []byte{0, 0})
	c.Write(rw)
	if u := d.MustWait(0); u.ID != h2 || !bytes.Equal(u.Out, rw) {
		t.Fatalf("used %d %x, want Rwalk on %d", u.ID, u.Out, h2)
	}
	if n := dev.stats.earlyClunks.Load(); n != 1 {
		t.Fatalf("early clunks %d, want 1", n)
	}
	dev.mu.Lock()
	n := len(dev.pending)
	dev.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests still pending", n)
	}
}

// TestClunkWithoutAgreement: a server that did not agree gets the
// guest's Tclunk as it came, and the guest waits for its reply.
func TestClunkWithoutAgreement(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	h := d.AddKick(0, virtiotest.R(tclunk(3, 9)), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, tclunk(3, 9)) {
		t.Fatalf("server got %x, want the guest's Tclunk", got)
	}
	if u, ok := d.Wait(0, 50*time.Millisecond); ok {
		t.Fatalf("used %d %x before the server replied", u.ID, u.Out)
	}
	c.Write(rclunk(3))
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, rclunk(3)) {
		t.Fatalf("used %d %x, want the server's Rclunk on %d", u.ID, u.Out, h)
	}
}

// TestEarlyClunkTags: the device's tags in flight are refused to the
// guest as duplicates; with all of them in flight a clunk waits for its
// reply; a session's end forgets them.
func TestEarlyClunkTags(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	for i := range uint16(earlyTags) {
		d.AddKick(0, virtiotest.R(tclunk(i, uint32(i))), virtiotest.W(64))
		if u := d.MustWait(0); !bytes.Equal(u.Out, rclunk(i)) {
			t.Fatalf("clunk %d: used %x, want Rclunk", i, u.Out)
		}
		if got := recv(t, c, br); !bytes.Equal(got, tclunk(earlyTagBase+i, uint32(i))) {
			t.Fatalf("clunk %d: server got %x", i, got)
		}
	}
	d.AddKick(0, virtiotest.R(frame(tTgetattr, earlyTagBase, nil)), virtiotest.W(64))
	wantErrno(t, d.MustWait(0), earlyTagBase, syscall.EINVAL)
	h := d.AddKick(0, virtiotest.R(tclunk(200, 7)), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, tclunk(200, 7)) {
		t.Fatalf("server got %x, want the guest's Tclunk: no device tag free", got)
	}
	c.Write(rclunk(200))
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, rclunk(200)) {
		t.Fatalf("used %d %x, want the server's Rclunk", u.ID, u.Out)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		dev.mu.Lock()
		n := len(dev.pending)
		dev.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests pending after the session ended", n)
		}
		time.Sleep(time.Millisecond)
	}
	if d.Pending(0) != 0 {
		t.Fatalf("%d chains still with the device", d.Pending(0))
	}
}

// TestXattrClunkWaits: the clunk of a Txattrcreate's fid sets the
// attribute, and its error is setxattr's: it goes to the server as it
// came and the guest gets the server's reply.
func TestXattrClunkWaits(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	body := binary.LittleEndian.AppendUint32(nil, 4)
	body = binary.LittleEndian.AppendUint16(body, 6)
	body = append(body, "user.a"...)
	body = binary.LittleEndian.AppendUint64(body, 1)
	body = binary.LittleEndian.AppendUint32(body, 0)
	xc := frame(tTxattrcreate, 2, body)
	d.AddKick(0, virtiotest.R(xc), virtiotest.W(64))
	recv(t, c, br)
	c.Write(frame(tTxattrcreate+1, 2, nil))
	d.MustWait(0)
	d.AddKick(0, virtiotest.R(tclunk(3, 4)), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, tclunk(3, 4)) {
		t.Fatalf("server got %x, want the guest's Tclunk", got)
	}
	c.Write(rlerror(3, syscall.ENOTSUP))
	wantErrno(t, d.MustWait(0), 3, syscall.ENOTSUP)
	d.AddKick(0, virtiotest.R(tclunk(5, 4)), virtiotest.W(64)) // a later fid 4: early again
	if u := d.MustWait(0); !bytes.Equal(u.Out, rclunk(5)) {
		t.Fatalf("used %x, want an early Rclunk", u.Out)
	}
}

// TestFlushOfEarlyClunk: a guest that flushes one of the device's tags
// (it cannot know them; a hostile one may guess) gets its Rflush, and no
// chain is written for the clunk under that tag.
func TestFlushOfEarlyClunk(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	d.AddKick(0, virtiotest.R(tclunk(3, 9)), virtiotest.W(64))
	d.MustWait(0)
	recv(t, c, br)
	fl := frame(tTflush, 4, binary.LittleEndian.AppendUint16(nil, earlyTagBase))
	h := d.AddKick(0, virtiotest.R(fl), virtiotest.W(64))
	if got := recv(t, c, br); !bytes.Equal(got, fl) {
		t.Fatalf("server got %x, want the flush", got)
	}
	rf := frame(tRflush, 4, nil)
	c.Write(rf)
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, rf) {
		t.Fatalf("used %d %x, want the Rflush on %d", u.ID, u.Out, h)
	}
	dev.mu.Lock()
	n := len(dev.pending)
	dev.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests pending", n)
	}
}
