package ninep

import (
	"encoding/binary"
	"net"

	"golang.org/x/sys/unix"

	sfs "sandfs/fs"
)

// Passed reads: a client in another process on the same host (the VMM's
// virtio-9p device, vmm/virtio/p9) reads a large Tread's data itself,
// straight into its guest's memory, from a descriptor of the file the
// server passes it, instead of the data crossing the socket: one copy
// (the file's pages to the guest) where there were three (file to
// server, server to socket, socket to guest).
//
// Two frames of sandfs's own, outside 9P2000.L's type numbers:
//
//	Tpassreads: size[4]=7 type[1]=240 tag[2]           the client's first frame
//	Rreadfd:    size[4]=19 type[1]=241 tag[2] offset[8] count[4]
//	            + the descriptor (SCM_RIGHTS, with the frame's bytes)
//
// A client sends Tpassreads before its Tversion to say it takes Rreadfd
// in place of Rread; the server agrees only where its owner allows it
// (Server.SetPassReads: the worlds' servers for their guests' VMMs) and
// the connection is a unix socket; else it ignores the frame. An Rreadfd
// answers a Tread of at least passMin bytes on a regular file open
// read-only (sfs.ReadPasser) whose data from offset holds passMin bytes
// or more: the client reads up to count bytes at offset from the
// descriptor, closes it, and builds the Rread itself (its count is what
// it read). Other reads are answered with Rread as before.
//
// The descriptor is read-only, of a file the client's user may read
// through 9P at that moment; a guest that took its VMM over could keep
// it and read that file later too, as an open fid would.
const (
	msgTpassreads = 240
	msgRreadfd    = 241
	msgRread      = 117

	rreadfdLen = 19
	// passMin is the smallest read passed: below it the copy costs less
	// than the descriptor's dup, send and close.
	passMin = 64 << 10
)

// passedRead is a Tread whose reply passes fd (the server's duplicate,
// closed once sent) for count bytes at off.
type passedRead struct {
	fd    int
	off   int64
	count int
}

// SetPassReads lets the server answer large reads with Rreadfd to a
// client on a unix socket that asks for it (Tpassreads), before it
// serves. Only for clients that may hold a read-only descriptor of what
// they read: a guest's VMM.
func (s *Server) SetPassReads(on bool) { s.passReads = on }

// passReadsAsked takes a Tpassreads frame: from now on the connection's
// large reads may be passed, if its server allows it and it is a unix
// socket.
func (c *conn) passReadsAsked() {
	if c.srv.passReads && c.unix != nil {
		c.passOn.Store(true)
	}
}

// passRead registers, for the Tread with tag (between begin and its
// reply), a passed reply instead of reading: h's file at off, len(p)
// bytes at most. It returns the count the reply will carry and true,
// or false when the read is not passed (the caller reads p).
func (c *conn) passRead(tag uint16, h sfs.Handle, off int64, max int) (int, bool) {
	if !c.passOn.Load() || max < passMin {
		return 0, false
	}
	rp, ok := h.(sfs.ReadPasser)
	if !ok {
		return 0, false
	}
	fd, size, ok := rp.DupReadOnly()
	if !ok {
		return 0, false
	}
	n := int(min(int64(max), size-off))
	if off >= size || n < passMin {
		unix.Close(fd)
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads[tag]
	if r == nil || r.pass != nil {
		unix.Close(fd)
		return 0, false
	}
	r.pass = &passedRead{fd: fd, off: off, count: n}
	return n, true
}

// closePasses closes the descriptors of passed replies never sent (the
// connection ended first).
func (c *conn) closePasses() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reads {
		if r.pass != nil {
			unix.Close(r.pass.fd)
			r.pass = nil
		}
	}
}

// sendPassed writes p's Rreadfd for tag, with its descriptor, in place
// of the Rread p9 encoded, and closes the descriptor.
func sendPassed(uc *net.UnixConn, tag uint16, p *passedRead) error {
	var b [rreadfdLen]byte
	binary.LittleEndian.PutUint32(b[0:], rreadfdLen)
	b[4] = msgRreadfd
	binary.LittleEndian.PutUint16(b[5:], tag)
	binary.LittleEndian.PutUint64(b[7:], uint64(p.off))
	binary.LittleEndian.PutUint32(b[15:], uint32(p.count))
	return sendWithFD(uc, b[:], p.fd)
}

// sendWithFD writes frame b with descriptor fd (SCM_RIGHTS, in the
// same write) and closes fd.
func sendWithFD(uc *net.UnixConn, b []byte, fd int) error {
	defer unix.Close(fd)
	_, _, err := uc.WriteMsgUnix(b, unix.UnixRights(fd), nil)
	return err
}
