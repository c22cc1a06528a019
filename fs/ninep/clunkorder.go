package ninep

import (
	"encoding/binary"
	"sync"
)

// Ordered clunks: a client may ask that each Tclunk of its connection be
// finished (the fid gone from p9's table, its file closed) before the
// server reads the connection's next request. Such a client can answer
// a clunk itself at once and send it on, and reuse the fid number in its
// next request without a race: p9 handles requests concurrently, and a
// Twalk naming as newfid a fid whose Tclunk was read first but not yet
// handled would have p9 put the new fid in the table and the clunk then
// take it away. The VMM's virtio-9p device does so (vmm/virtio/p9,
// clunk.go): a Tclunk is a quarter to a third of a guest's requests on
// lookups and small reads, each a round trip its 9p client waits for.
//
// Two frames of sandfs's own, beside Tpassreads (passread.go):
//
//	Torderclunks: size[4]=7 type[1]=242 tag[2]=NOTAG   a client's first or second frame
//	Rorderclunks: size[4]=7 type[1]=243 tag[2]=NOTAG   the server agrees, before any reply
//
// The server agrees only where its owner allows it (Server.SetOrderClunks:
// the worlds' servers, whose clunks close local files) and the
// connection is a unix socket; else it ignores the frame and sends
// nothing. A server that agreed reads nothing more after a Tclunk until
// its reply is on its way (or the connection ends); a Tclunk whose tag is
// already in flight, which p9 drops unanswered, holds nothing up.
const (
	msgTorderclunks = 242
	msgRorderclunks = 243
)

// SetOrderClunks lets the server finish each Tclunk before it reads the
// next request of a client on a unix socket that asks (Torderclunks),
// before it serves. Only for trees whose clunks cannot block for long:
// while one runs, nothing else of its connection is read.
func (s *Server) SetOrderClunks(on bool) { s.orderClunks = on }

// clunkOrder is a connection's side of ordered clunks.
type clunkOrder struct {
	mu   sync.Mutex
	on   bool          // the client asked and the server agreed
	wait chan struct{} // closed when the Tclunk with tag has its reply
	tag  uint16
}

// orderClunksAsked takes a Torderclunks frame: if the server allows it,
// the connection's clunks are ordered from now on and the client is told
// so. Called before any request reaches p9, so no reply is being
// written.
func (c *conn) orderClunksAsked() error {
	if !c.srv.orderClunks || c.unix == nil {
		return nil
	}
	c.clunks.mu.Lock()
	c.clunks.on = true
	c.clunks.mu.Unlock()
	var b [7]byte
	binary.LittleEndian.PutUint32(b[:], 7)
	b[4] = msgRorderclunks
	binary.LittleEndian.PutUint16(b[5:], 0xffff)
	_, err := c.unix.Write(b[:])
	return err
}

// sawClunkTag notes a Tclunk with tag, read now: the next read waits for
// its reply (waitClunk) if clunks are ordered and tag was not in flight.
func (c *conn) sawClunkTag(tag uint16, fresh bool) {
	o := &c.clunks
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.on && fresh {
		o.wait, o.tag = make(chan struct{}), tag
	}
}

// clunkReplied notes the reply for tag, about to be written.
func (c *conn) clunkReplied(tag uint16) {
	o := &c.clunks
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wait != nil && o.tag == tag {
		close(o.wait)
		o.wait = nil
	}
}

// waitClunk waits until the Tclunk read last, if clunks are ordered, has
// its reply, or the connection ends.
func (c *conn) waitClunk() {
	c.clunks.mu.Lock()
	w := c.clunks.wait
	c.clunks.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case <-w:
	case <-c.ctx.Done():
	}
}
