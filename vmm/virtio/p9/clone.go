package p9

import (
	"encoding/binary"
	"syscall"
	"time"

	"sandfs/vmm/virtio"
)

// Early clones. Linux opens a file, and makes the fid it writes back
// through, by walking a fid to a new one with no names (a clone) and
// then opening the new fid: two round trips. A clone fails only for a
// bad fid or at the server's bound on a connection's fids (EMFILE: fs/ninep,
// fidlimit.go). On a session whose server finishes each clone before it
// reads the next request (it agreed with Rorderclunks: fs/ninep,
// clunkorder.go), the device answers a clone at once with an Rwalk of no
// qids and sends it on under a tag of its own, as it does clunks
// (clunk.go). If the server fails it, the device keeps the error for the
// new fid (failed): the guest's requests on that fid that the server
// already had come back as EBADF (it has no such fid), which becomes the
// clone's error; later ones are answered with it at once; the guest's
// clunk of the fid is answered at once and not sent; a walk or attach
// to the fid number starts it afresh. At most maxFailed fids at once:
// past that the session's clones all wait for their reply.
const maxFailed = 1024

// fidFirst reports whether a request of type typ names a fid it uses
// (not one it creates) in its first four bytes after the header.
func fidFirst(typ uint8) bool {
	switch typ {
	case 8, 12, 14, 16, 18, 22, 24, 26, 30, 32, 40, 50, 52, 54, 70, 72, 74, 76, tTwalk, 116, 118, tTclunk, 122:
		// statfs lopen lcreate symlink mknod readlink getattr setattr
		// xattrwalk xattrcreate readdir fsync lock getlock link mkdir
		// renameat unlinkat walk read write clunk remove
		return true
	}
	return false
}

// createdFid is the fid a request of type typ (frame b) creates, if any:
// Twalk's and Txattrwalk's newfid, Tattach's fid.
func createdFid(typ uint8, b []byte) (uint32, bool) {
	switch {
	case (typ == tTwalk || typ == 30) && len(b) >= headerLen+8:
		return binary.LittleEndian.Uint32(b[headerLen+4:]), true
	case typ == tTattach && len(b) >= headerLen+4:
		return binary.LittleEndian.Uint32(b[headerLen:]), true
	}
	return 0, false
}

// usedFid is the fid the request of type typ (frame b) uses first, if
// any.
func usedFid(typ uint8, b []byte) (uint32, bool) {
	if !fidFirst(typ) || len(b) < headerLen+4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[headerLen:]), true
}

// answerFailedFid answers the guest's request of c (header h, frame b)
// at once if it uses a fid whose early clone failed, and reports
// whether it did; a request that creates a fid number clears it.
func (d *Device) answerFailedFid(q *virtio.Queue, c *virtio.Chain, h header, b []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.failed) == 0 {
		return false
	}
	if fid, ok := usedFid(h.typ, b); ok {
		if e, failed := d.failed[fid]; failed {
			if h.typ == tTclunk {
				delete(d.failed, fid)
				d.writeLocked(q, c, rclunk(h.tag))
			} else {
				d.writeLocked(q, c, rlerror(h.tag, e))
			}
			return true
		}
	}
	if fid, ok := createdFid(h.typ, b); ok {
		delete(d.failed, fid)
	}
	return false
}

// cloneEarly answers the request of c (header h, whole frame b) at once
// if it is a clone and the session allows it, and returns the frame to
// send in its place (the device's tag); false leaves the request to the
// usual path.
func (d *Device) cloneEarly(q *virtio.Queue, c *virtio.Chain, h header, b []byte, popped time.Time) (item, bool) {
	if h.typ != tTwalk || len(b) != headerLen+10 || binary.LittleEndian.Uint16(b[headerLen+8:]) != 0 {
		return item{}, false
	}
	fid, newfid := binary.LittleEndian.Uint32(b[headerLen:]), binary.LittleEndian.Uint32(b[headerLen+4:])
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.open || !d.ordered || d.noClones || fid == newfid {
		return item{}, false
	}
	if _, dup := d.pending[h.tag]; dup {
		return item{}, false
	}
	tag, ok := d.earlyTagLocked()
	if !ok {
		return item{}, false
	}
	d.pending[tag] = &request{gen: d.gen, oldTag: -1, popped: popped, clone: true, fid: newfid}
	d.writeLocked(q, c, rwalkNone(h.tag))
	d.stats.earlyClones.Add(1)
	binary.LittleEndian.PutUint16(b[5:], tag)
	return item{b: b, gen: d.gen, popped: popped}, true
}

// cloneReplied takes the server's reply b to r, a clone answered early.
// d.mu held.
func (d *Device) cloneReplied(r *request, h header, b []byte) {
	if h.typ == tRwalk {
		return
	}
	e := syscall.EIO
	if h.typ == tRlerror && len(b) == rlerrorLen {
		e = syscall.Errno(binary.LittleEndian.Uint32(b[headerLen:]))
	}
	if len(d.failed) >= maxFailed {
		d.noClones = true // this one's requests get the server's EBADF
		return
	}
	d.failed[r.fid] = e
}

// failedReply is the reply for the guest's request r in place of the
// server's b: the error of r's fid's failed clone in place of EBADF.
// d.mu held.
func (d *Device) failedReply(r *request, h header, b []byte) []byte {
	if !r.usesFid || len(d.failed) == 0 || h.typ != tRlerror || len(b) != rlerrorLen ||
		syscall.Errno(binary.LittleEndian.Uint32(b[headerLen:])) != syscall.EBADF {
		return b
	}
	if e, ok := d.failed[r.fid]; ok {
		return rlerror(h.tag, e)
	}
	return b
}

// rwalkNone is an Rwalk of no qids for tag.
func rwalkNone(tag uint16) []byte {
	b := make([]byte, headerLen+2)
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	b[4] = tRwalk
	binary.LittleEndian.PutUint16(b[5:], tag)
	return b
}
