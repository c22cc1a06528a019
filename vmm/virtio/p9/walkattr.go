package p9

import (
	"encoding/binary"
	"log/slog"
	"time"

	"sandfs/vmm/virtio"
)

// Lookups with their attributes. Linux's 9p client looks a name up with
// a Twalk of one name and at once asks the new fid's attributes
// (Tgetattr): two round trips. On a session whose server is sandfs's
// (it agreed to ordered clunks, clunk.go; its p9 server takes gVisor's
// Twalkgetattr, which walks and returns the attributes the walk saw) the
// device sends such a walk as a Twalkgetattr, gives the guest the Rwalk,
// and keeps the attributes for the new fid: if the guest's next request
// is a Tgetattr of that fid, within attrFresh of the walk's reply, the
// device answers it with them. Any other request first, a later one, or
// a second Tgetattr goes to the server. So the attributes a lookup
// returns are those of its walk, taken within the same system call of the
// guest's (a stat is both), never older than attrFresh.
const (
	tTwalkgetattr = 126
	tRwalkgetattr = 127
	attrMaskLen   = 8
	qidLen        = 13
	// attrLen is p9's Attr as Rgetattr and Rwalkgetattr carry it: mode,
	// uid, gid (4 bytes each), then nlink, rdev, size, blksize, blocks,
	// the four times as seconds and nanoseconds, gen and data_version (8
	// bytes each).
	attrLen   = 3*4 + 15*8
	attrFresh = 10 * time.Millisecond
)

// walkAttrs are the attributes of the last lookup's new fid, until the
// guest's next request.
type walkAttrs struct {
	fid  uint32
	gen  uint64
	body []byte // an Rgetattr's body: valid, the fid's qid, attr
	at   time.Time
}

// lookupWithAttrs turns a small Twalk of one name (frame b) into a
// Twalkgetattr if the session allows it, and returns the new fid (ok).
func (d *Device) lookupWithAttrs(h header, b []byte) (newfid uint32, ok bool) {
	if h.typ != tTwalk || len(b) < headerLen+10 || binary.LittleEndian.Uint16(b[headerLen+8:]) != 1 {
		return 0, false
	}
	d.mu.Lock()
	on := d.open && d.ordered
	d.mu.Unlock()
	if !on {
		return 0, false
	}
	b[4] = tTwalkgetattr // the same body: fid, newfid, nwname, names
	return binary.LittleEndian.Uint32(b[headerLen+4:]), true
}

// attrsReplied turns the server's Rwalkgetattr b for r's lookup into the
// Rwalk for the guest and keeps the attributes (d.attrs). A frame too
// short for what it says becomes Rlerror(EIO). d.mu held.
func (d *Device) attrsReplied(r *request, b []byte) []byte {
	h := parseHeader(b)
	body := b[headerLen:]
	const fixed = attrMaskLen + attrLen
	if len(body) < fixed+2 {
		slog.Warn("virtio-9p: short Rwalkgetattr", "size", h.size)
		return rlerror(h.tag, eio)
	}
	n := int(binary.LittleEndian.Uint16(body[fixed:]))
	qids := body[fixed+2:]
	if len(qids) != n*qidLen {
		slog.Warn("virtio-9p: Rwalkgetattr of the wrong size", "size", h.size, "qids", n)
		return rlerror(h.tag, eio)
	}
	out := append(replyHeader(tRwalk, h.tag, 2+len(qids)), body[fixed:]...)
	if n == 1 {
		a := make([]byte, 0, attrMaskLen+qidLen+attrLen)
		a = append(a, body[:attrMaskLen]...)
		a = append(a, qids...)
		a = append(a, body[attrMaskLen:fixed]...)
		d.attrs = &walkAttrs{fid: r.lookup, gen: r.gen, body: a, at: time.Now()}
	}
	return out
}

// answerFromLookup answers the guest's request of c (header h, frame b)
// from the last lookup's attributes if it may (see above) and reports
// whether it did; any request ends their use.
func (d *Device) answerFromLookup(q *virtio.Queue, c *virtio.Chain, h header, b []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.attrs
	if a == nil {
		return false
	}
	d.attrs = nil
	if h.typ != tTgetattr || len(b) != headerLen+4+attrMaskLen || binary.LittleEndian.Uint32(b[headerLen:]) != a.fid ||
		a.gen != d.gen || !d.open || time.Since(a.at) > attrFresh {
		return false
	}
	d.writeLocked(q, c, append(replyHeader(tRgetattr, h.tag, len(a.body)), a.body...))
	d.stats.lookupAttrs.Add(1)
	return true
}
