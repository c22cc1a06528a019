package p9

import (
	"encoding/binary"
	"log/slog"
	"syscall"
	"time"

	"sandfs/vmm/virtio"
)

// Early clunks. Linux's 9p client clunks every fid it is done with and
// waits for each Rclunk: a lookup is Twalk, Tgetattr, Tclunk, and an open
// file's close one more. Where the server has agreed to finish each
// Tclunk before it reads the next request (fs/ninep, clunkorder.go:
// Torderclunks, Rorderclunks), the device answers a guest's Tclunk at
// once with Rclunk and sends the clunk on under a tag of its own: the
// guest may reuse the fid number in its very next request, which the
// server reads only after the fid is gone. A lookup is then two round
// trips to the server, not three.
//
// The device's tags are earlyTags from earlyTagBase: a guest request
// with one of them while it is in flight is refused as a duplicate tag
// (Linux takes the lowest free tag, with at most queueSize requests in
// flight). When all are in flight, or before the server's agreement, a
// clunk waits for its reply as any request. The guest's Rclunk says
// success whatever the server answers: a clunk that fails still ends
// the fid for Linux's client, which does not look at its error (the
// server's is logged), but for a fid of Txattrcreate: its clunk sets
// the attribute, and setxattr(2) returns the clunk's error. Those clunks
// wait for their reply (xattrFids, at most maxXattrFids at once: past
// that the session's clunks all wait).
const (
	earlyTagBase  = 0xff00
	earlyTags     = 64
	maxXattrFids  = 1024
	tTxattrcreate = 32            // P9_TXATTRCREATE: size[4] type[1] tag[2] fid[4] name[s] attr_size[8] flags[4]
	clunkLen      = headerLen + 4 // Tclunk: size[4] type[1] tag[2] fid[4]
)

// Frames of sandfs's own about clunks (fs/ninep, clunkorder.go).
const (
	tTorderclunks = 242
	tRorderclunks = 243
)

// torderclunks asks the server for ordered clunks.
var torderclunks = []byte{7, 0, 0, 0, tTorderclunks, 0xff, 0xff}

// clunkEarly answers the request of c (header h, whole frame b) at once
// if it is a Tclunk and the session allows it, and returns the frame to
// send in its place (the device's tag); false leaves the request to the
// usual path.
func (d *Device) clunkEarly(q *virtio.Queue, c *virtio.Chain, h header, b []byte, popped time.Time) (item, bool) {
	if h.typ != tTclunk || h.size != clunkLen || len(b) != clunkLen {
		return item{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.open || !d.ordered {
		return item{}, false
	}
	if _, dup := d.pending[h.tag]; dup {
		return item{}, false // refused as a duplicate by register
	}
	fid := binary.LittleEndian.Uint32(b[headerLen:])
	if d.xattrFids[fid] {
		delete(d.xattrFids, fid)
		return item{}, false
	}
	tag, ok := d.earlyTagLocked()
	if !ok {
		return item{}, false
	}
	d.pending[tag] = &request{gen: d.gen, oldTag: -1, popped: popped} // no chain: answered below
	d.writeLocked(q, c, rclunk(h.tag))
	d.stats.earlyClunks.Add(1)
	binary.LittleEndian.PutUint16(b[5:], tag)
	return item{b: b, gen: d.gen, popped: popped}, true
}

// sawXattrCreate notes the fid of a guest's Txattrcreate (header h,
// frame b): its clunk is not answered early.
func (d *Device) sawXattrCreate(h header, b []byte) {
	if h.typ != tTxattrcreate || len(b) < headerLen+4 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.xattrFids) >= maxXattrFids {
		d.ordered = false // the session's clunks all wait from now on
		return
	}
	d.xattrFids[binary.LittleEndian.Uint32(b[headerLen:])] = true
}

// earlyTagLocked returns a device tag not in flight. d.mu held.
func (d *Device) earlyTagLocked() (uint16, bool) {
	for i := range uint16(earlyTags) {
		if _, busy := d.pending[earlyTagBase+i]; !busy {
			return earlyTagBase + i, true
		}
	}
	return 0, false
}

// earlyReplied takes the server's reply to a clunk answered early (r has
// no chain). d.mu held.
func earlyReplied(h header, b []byte) {
	if h.typ == tRclunk {
		return
	}
	if h.typ == tRlerror && len(b) == rlerrorLen {
		slog.Warn("virtio-9p: a clunk the device answered failed at the server", "errno", syscall.Errno(binary.LittleEndian.Uint32(b[headerLen:])))
		return
	}
	slog.Warn("virtio-9p: a clunk the device answered failed at the server", "type", h.typ)
}

// orderedClunks notes the server's agreement for session gen.
func (d *Device) orderedClunks(gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen == gen && d.open {
		d.ordered = true
	}
}

// rclunk is the Rclunk frame for tag.
func rclunk(tag uint16) []byte { return replyHeader(tRclunk, tag, 0) }
