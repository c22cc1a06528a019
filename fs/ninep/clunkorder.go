package ninep

import "encoding/binary"

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

// orderClunksAsked takes a Torderclunks frame: if the server allows it,
// the connection's clunks are ordered from now on and the client is told
// so. Called before any request reaches p9, so no reply is being
// written.
func (c *conn) orderClunksAsked() error {
	if !c.srv.orderClunks || c.unix == nil {
		return nil
	}
	c.orderOn.Store(true)
	var b [7]byte
	binary.LittleEndian.PutUint32(b[:], 7)
	b[4] = msgRorderclunks
	binary.LittleEndian.PutUint16(b[5:], 0xffff)
	_, err := c.unix.Write(b[:])
	return err
}

// orderClunk notes a Tclunk with tag, read now, and returns what the
// frame reader waits on before it reads the next frame (closed when the
// reply for tag is about to be written: clunkReplied), or nil if clunks
// are not ordered or tag was in flight already (not fresh).
func (c *conn) orderClunk(tag uint16, fresh bool) <-chan struct{} {
	if !c.orderOn.Load() || !fresh {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clunkWait, c.clunkTag = make(chan struct{}), tag
	return c.clunkWait
}

// clunkRepliedLocked notes the reply for tag, about to be written. c.mu
// held.
func (c *conn) clunkRepliedLocked(tag uint16) {
	if c.clunkWait != nil && c.clunkTag == tag {
		close(c.clunkWait)
		c.clunkWait = nil
	}
}
