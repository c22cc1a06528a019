package ninep

import (
	"encoding/binary"
	"net"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// Passed files: a client in another process on the same host (the VMM's
// virtio-9p device, vmm/virtio/p9/passfile.go) answers its guest's
// reads, writes and fsyncs of an open file itself, on a duplicate of
// the server's descriptor of that file, instead of a round trip here
// for each. The server keeps the fid open as before; every other
// request on it (getattr, setattr, lock, clunk) still comes here.
//
// Two frames of sandfs's own, outside 9P2000.L's type numbers:
//
//	Tpassfiles: size[4]=7 type[1]=244 tag[2]           one of the client's first three frames
//	Rlopenfd:   size[4]=25 type[1]=245 tag[2] rtype[1] qid[13] iounit[4]
//	            + the descriptor (SCM_RIGHTS, with the frame's bytes)
//
// A client sends Tpassfiles before its Tversion to say it takes Rlopenfd
// in place of Rlopen and Rlcreate (rtype says which); the server agrees
// only where its owner allows it (Server.SetPassFiles: the worlds'
// servers for their guests' VMMs) and the connection is a unix socket;
// else it ignores the frame, as it has no reply. An Rlopenfd answers an
// open or create whose handle is a regular file of a real file system
// (sfs.FilePasser); its descriptor has the open's access mode.
//
// The descriptor is one the client's guest may use through 9P at that
// moment, as it was opened; a guest that took its VMM over could keep it
// and go on using that file after it clunked the fid, as long as the
// file exists: a world's upper file (a write, a copy-up) or a file it
// may read. Applying a world copies its files into the lower, so a kept
// descriptor of the upper never reaches the lower.
//
// p9 builds the Rlopen from what File.Open returns, so the open's handle
// is offered (offerFile) by returning a cookie, with offerBit set, as the
// iounit; the reply writer takes the cookie's descriptor and sends the
// Rlopenfd with the server's real iounit (passOpen).
const (
	msgTpassfiles = 244
	msgRlopenfd   = 245

	rlopenLen   = 24 // size[4] type[1] tag[2] qid[13] iounit[4]
	rlopenfdLen = rlopenLen + 1
	offerBit    = uint32(1) << 31
	// maxOffers bounds the descriptors offered and not yet sent: opens
	// in flight on one connection.
	maxOffers = 64
)

// SetPassFiles lets the server answer opens with Rlopenfd to a client
// on a unix socket that asks for it (Tpassfiles), before it serves. Only
// for clients that may hold the descriptors of what they open: a
// guest's VMM.
func (s *Server) SetPassFiles(on bool) { s.passFiles = on }

// passFilesAsked takes a Tpassfiles frame.
func (c *conn) passFilesAsked() {
	if c.srv.passFiles && c.unix != nil {
		c.filesOn.Store(true)
	}
}

// offerFile returns the iounit File.Open or Create is to return for h:
// a cookie standing for a duplicate of its descriptor if the connection
// takes passed files and h is one to pass, else ioUnit.
func (c *conn) offerFile(h sfs.Handle, ioUnit uint32) uint32 {
	if !c.filesOn.Load() {
		return ioUnit
	}
	fp, ok := h.(sfs.FilePasser)
	if !ok {
		return ioUnit
	}
	fd, ok := fp.DupFile()
	if !ok {
		return ioUnit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.offers) >= maxOffers {
		unix.Close(fd)
		return ioUnit
	}
	for {
		c.offerSeq++
		cookie := offerBit | c.offerSeq&^offerBit
		if _, used := c.offers[cookie]; !used {
			c.offers[cookie] = fd
			return cookie
		}
	}
}

// takeOffer returns the descriptor cookie stands for, -1 if none.
func (c *conn) takeOffer(cookie uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	fd, ok := c.offers[cookie]
	if !ok {
		return -1
	}
	delete(c.offers, cookie)
	return fd
}

// closeOffers closes the descriptors offered and never sent (the
// connection ended first).
func (c *conn) closeOffers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cookie, fd := range c.offers {
		unix.Close(fd)
		delete(c.offers, cookie)
	}
}

// passOpen turns reply b, a whole Rlopen or Rlcreate, into what is to be
// sent: if its iounit is an offer's cookie, the iounit becomes the
// server's and the descriptor is returned (-1: none, b goes as it is).
func (c *conn) passOpen(b []byte) int {
	if len(b) != rlopenLen {
		return -1
	}
	iou := binary.LittleEndian.Uint32(b[20:])
	if iou&offerBit == 0 {
		return -1
	}
	binary.LittleEndian.PutUint32(b[20:], c.srv.ioUnit)
	return c.takeOffer(iou)
}

// sendOpenFD writes Rlopenfd for reply b (an Rlopen or Rlcreate) with
// descriptor fd, and closes fd.
func sendOpenFD(uc *net.UnixConn, b []byte, fd int) error {
	out := make([]byte, rlopenfdLen)
	binary.LittleEndian.PutUint32(out, rlopenfdLen)
	out[4] = msgRlopenfd
	copy(out[5:7], b[5:7]) // tag
	out[7] = b[4]          // the reply it stands for
	copy(out[8:], b[7:])   // qid, iounit
	return sendWithFD(uc, out, fd)
}
