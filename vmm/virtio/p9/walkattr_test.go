package p9

import (
	"bytes"
	"encoding/binary"
	"testing"

	"sandfs/vmm/virtio/virtiotest"
)

// twalk1 is a Twalk of one name from fid to newfid.
func twalk1(tag uint16, fid, newfid uint32, name string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, fid)
	b = binary.LittleEndian.AppendUint32(b, newfid)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	return frame(tTwalk, tag, append(b, name...))
}

func tgetattr(tag uint16, fid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, fid)
	return frame(tTgetattr, tag, binary.LittleEndian.AppendUint64(b, 0x7ff))
}

// lookupReply is the server's Rwalkgetattr for tag: valid, attr (bytes
// 1, 2, ...), one qid (0xa0...).
func lookupReply(tag uint16) (rwg, rwalk, rgetattr []byte) {
	valid := binary.LittleEndian.AppendUint64(nil, 0x3fff)
	attr := make([]byte, attrLen)
	for i := range attr {
		attr[i] = byte(i + 1)
	}
	qid := bytes.Repeat([]byte{0xa0}, qidLen)
	body := append(append(append(append([]byte(nil), valid...), attr...), 1, 0), qid...)
	rwg = frame(tRwalkgetattr, tag, body)
	rwalk = frame(tRwalk, tag, append([]byte{1, 0}, qid...))
	rgetattr = frame(tRgetattr, tag, append(append(append([]byte(nil), valid...), qid...), attr...))
	return
}

// TestLookupAttrs: with a sandfs server, a one-name Twalk goes as a
// Twalkgetattr, the guest gets an Rwalk, and its next request, a
// Tgetattr of the new fid, is answered with the walk's attributes; a
// second one goes to the server, as does one after another request.
func TestLookupAttrs(t *testing.T) {
	dev, d, s := newDevice(t, 0)
	c, br := versionAgreeing(t, d, s, true)
	lookup := func(tag uint16, newfid uint32) {
		t.Helper()
		walk := twalk1(tag, 1, newfid, "f")
		d.AddKick(0, virtiotest.R(walk), virtiotest.W(256))
		want := append([]byte(nil), walk...)
		want[4] = tTwalkgetattr
		if got := recv(t, c, br); !bytes.Equal(got, want) {
			t.Fatalf("server got %x, want the Twalkgetattr %x", got, want)
		}
		rwg, rwalk, _ := lookupReply(tag)
		c.Write(rwg)
		if u := d.MustWait(0); !bytes.Equal(u.Out, rwalk) {
			t.Fatalf("guest got %x, want Rwalk %x", u.Out, rwalk)
		}
	}
	lookup(2, 5)
	h := d.AddKick(0, virtiotest.R(tgetattr(3, 5)), virtiotest.W(256))
	_, _, rga := lookupReply(3)
	if u := d.MustWait(0); u.ID != h || !bytes.Equal(u.Out, rga) {
		t.Fatalf("used %d %x, want the lookup's Rgetattr %x", u.ID, u.Out, rga)
	}
	for _, reqs := range [][][]byte{
		{tgetattr(4, 5)},                 // a second getattr of the fid
		{tgetattr(6, 9), tgetattr(4, 5)}, // another request first
	} {
		if len(reqs) > 1 {
			lookup(2, 5)
		}
		for _, req := range reqs {
			d.AddKick(0, virtiotest.R(req), virtiotest.W(256))
			if got := recv(t, c, br); !bytes.Equal(got, req) {
				t.Fatalf("server got %x, want %x", got, req)
			}
			reply := frame(req[4]+1, binary.LittleEndian.Uint16(req[5:]), nil)
			c.Write(reply)
			if u := d.MustWait(0); !bytes.Equal(u.Out, reply) {
				t.Fatalf("guest got %x, want the server's %x", u.Out, reply)
			}
		}
	}
	if n := dev.stats.lookupAttrs.Load(); n != 1 {
		t.Fatalf("getattrs answered by the device: %d, want 1", n)
	}
}

// TestLookupWithoutAgreement: a server that did not agree gets the
// guest's Twalk as it came.
func TestLookupWithoutAgreement(t *testing.T) {
	_, d, s := newDevice(t, 0)
	c, br := version(t, d, s)
	walk := twalk1(2, 1, 5, "f")
	d.AddKick(0, virtiotest.R(walk), virtiotest.W(256))
	if got := recv(t, c, br); !bytes.Equal(got, walk) {
		t.Fatalf("server got %x, want the guest's Twalk", got)
	}
}
