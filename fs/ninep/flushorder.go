package ninep

import "encoding/binary"

// msgRflush is the reply to Tflush: a header alone.
const msgRflush = 109

// flushOrder keeps 9P's order of a flush's replies: when a Tflush names a
// request still in progress, that request's reply (its result, or EINTR
// once the flush interrupts it) goes out before the Rflush, so a client
// that forgets the old tag at Rflush never sees a reply for it after,
// possibly for a new request that reused the tag (the Linux client does
// reuse it at once). p9 v0.3.0 does not keep this order: it lets the
// next request be received before the current one has marked its tag
// busy, so a Tflush that follows a Tread closely finds no such tag and is
// answered first, and it frees a tag before sending its reply.
//
// Bounded by the tags a client can have in flight (65536).
type flushOrder struct {
	inflight map[uint16]struct{} // requests seen, not yet answered
	waits    map[uint16]uint16   // Tflush tag -> the tag it flushes, while that is in flight
	held     map[uint16][]uint16 // tag -> Rflush tags held until its reply is written
}

func newFlushOrder() flushOrder {
	return flushOrder{inflight: map[uint16]struct{}{}, waits: map[uint16]uint16{}, held: map[uint16][]uint16{}}
}

// flush notes Tflush tag of oldtag.
func (o *flushOrder) flush(tag, oldtag uint16) {
	if _, ok := o.inflight[oldtag]; ok && oldtag != tag {
		o.waits[tag] = oldtag
	}
}

// reply notes the reply of typ for tag, whose header is about to be
// written, and says whether it is an Rflush to hold back.
func (o *flushOrder) reply(typ uint8, tag uint16) (hold bool) {
	delete(o.inflight, tag)
	old, ok := o.waits[tag]
	delete(o.waits, tag)
	if !ok || typ != msgRflush {
		return false
	}
	if _, busy := o.inflight[old]; !busy {
		return false // answered already, and so written: the replies are written one at a time
	}
	o.held[old] = append(o.held[old], tag)
	return true
}

// release returns the Rflush tags held for tag's reply, now written.
func (o *flushOrder) release(tag uint16) []uint16 {
	ts := o.held[tag]
	delete(o.held, tag)
	return ts
}

// rflushFrame is the whole Rflush reply with tag.
func rflushFrame(tag uint16) []byte {
	b := make([]byte, 7)
	binary.LittleEndian.PutUint32(b, 7)
	b[4] = msgRflush
	binary.LittleEndian.PutUint16(b[5:], tag)
	return b
}

// sawRequest notes a request with tag in progress and reports whether
// the tag was free (else p9 drops the request unanswered).
func (c *conn) sawRequest(tag uint16) (fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, busy := c.flushes.inflight[tag]
	c.flushes.inflight[tag] = struct{}{}
	return !busy
}

// releaseFlushes returns the Rflush replies held for the reply with tag.
func (c *conn) releaseFlushes(tag uint16) []uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushes.release(tag)
}
