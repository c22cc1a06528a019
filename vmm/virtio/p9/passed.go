package p9

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/vmm/virtio"
)

// Passed reads (the daemon's side: fs/ninep/passread.go): the device
// asks its server, first thing on each session's socket, to answer
// large reads of plain files with the file's descriptor (Rreadfd), and
// reads that data from the file straight into the request's chain
// itself: the file's pages are copied once, into guest memory, where an
// Rread's data was copied three times (file to server, server to
// socket, socket to guest).
//
//	Tpassreads: size[4]=7 type[1]=240 tag[2]=NOTAG
//	Rreadfd:    size[4]=19 type[1]=241 tag[2] offset[8] count[4], and one
//	            descriptor (SCM_RIGHTS) with its bytes
//
// The device answers the guest's Tread with the Rread it builds: size[4]
// Rread[1] tag[2] count[4] data[count], count what it read (at most the
// Rreadfd's, and the chain's room). A descriptor is the server's; the
// device only reads it, at the offset given, and closes it.
const (
	tTpassreads = 240
	tRreadfd    = 241
	tRread      = 117

	rreadfdLen  = 19
	rreadHdrLen = headerLen + 4 // size type tag count
	maxHeldFDs  = 16            // descriptors received ahead of their frames (one per Rreadfd, in order)
)

// tpassreads is the frame that asks for passed reads.
var tpassreads = []byte{7, 0, 0, 0, tTpassreads, 0xff, 0xff}

// rightsReader reads a unix socket and keeps, in order, the descriptors
// that come with its bytes: each belongs to the next Rreadfd frame read.
type rightsReader struct {
	c   *net.UnixConn
	oob []byte
	fds []int
}

func newRightsReader(c *net.UnixConn) *rightsReader {
	return &rightsReader{c: c, oob: make([]byte, unix.CmsgSpace(4*maxHeldFDs))}
}

// Read implements io.Reader.
func (r *rightsReader) Read(p []byte) (int, error) {
	n, oobn, flags, _, err := r.c.ReadMsgUnix(p, r.oob)
	if oobn > 0 {
		if perr := r.keep(r.oob[:oobn]); perr != nil && err == nil {
			err = perr
		}
	}
	if flags&unix.MSG_CTRUNC != 0 && err == nil {
		err = errors.New("virtio-9p: server sent more descriptors than the device holds")
	}
	return max(n, 0), err // (n is -1 with some errors)
}

// keep takes the descriptors out of control data b.
func (r *rightsReader) keep(b []byte) error {
	msgs, err := unix.ParseSocketControlMessage(b)
	if err != nil {
		return err
	}
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue // not descriptors
		}
		r.fds = append(r.fds, fds...)
	}
	if len(r.fds) > maxHeldFDs {
		return fmt.Errorf("virtio-9p: %d descriptors from the server with no Rreadfd", len(r.fds))
	}
	return nil
}

// take returns the oldest descriptor kept, if any.
func (r *rightsReader) take() (int, bool) {
	if len(r.fds) == 0 {
		return -1, false
	}
	fd := r.fds[0]
	r.fds = r.fds[1:]
	return fd, true
}

// close closes the descriptors no frame took.
func (r *rightsReader) close() {
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	r.fds = nil
}

// readPassed reads the Rreadfd h (its header checked and buffered in br)
// of session gen, takes its descriptor from fds and answers the pending
// Tread with the file's data, read straight into its chain. An error
// reading the file answers the Tread with Rlerror; a frame without its
// descriptor, or a malformed one, ends the session.
func (d *Device) readPassed(q *virtio.Queue, br *bufio.Reader, gen uint64, h header, fds *rightsReader) error {
	b, fd, err := readWithFD(br, h, rreadfdLen, "Rreadfd", fds)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	off, count := int64(binary.LittleEndian.Uint64(b[7:])), int(binary.LittleEndian.Uint32(b[15:]))
	if !d.t.Begin() {
		return errClosing
	}
	defer d.t.End()
	got := time.Now()
	r := d.takePending(h.tag, gen, 0)
	if r == nil {
		slog.Warn("virtio-9p: reply for no request", "tag", h.tag, "type", h.typ)
		return nil
	}
	n, err := preadChain(r.c, fd, off, count, h.tag)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !frameBuffered(br) {
		defer d.t.SignalUsed(q)
	}
	if err != nil {
		if errors.Is(err, virtio.ErrBadChain) {
			d.t.Fail(err)
			return nil
		}
		slog.Warn("virtio-9p: passed read", "tag", h.tag, "off", off, "count", count, "err", err)
		d.writeLocked(q, r.c, rlerror(h.tag, msg.Errno(err)))
		return nil
	}
	if !d.t.Failed() {
		q.Push(r.c.Head, uint32(rreadHdrLen+n))
	}
	d.stats.replied(got.Sub(r.popped), time.Since(got), rreadHdrLen+n)
	d.stats.passedReplies.Add(1)
	return nil
}

// readWithFD reads frame h, of sandfs's type name that must be size
// bytes long (its header checked and buffered in br), and takes the
// descriptor that came with it from fds.
func readWithFD(br *bufio.Reader, h header, size uint32, name string, fds *rightsReader) ([]byte, int, error) {
	if h.size != size {
		return nil, -1, fmt.Errorf("server %s of %d bytes", name, h.size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, -1, err
	}
	fd, ok := fds.take()
	if !ok {
		return nil, -1, fmt.Errorf("server %s without its descriptor", name)
	}
	return b, fd, nil
}

// preadChain reads up to count bytes of fd at off into c's writable
// part after an Rread header for tag, which it writes once it knows the
// count, and returns the count. The chain's room bounds it.
func preadChain(c *virtio.Chain, fd int, off int64, count int, tag uint16) (int, error) {
	if c.WritableSpace() < rreadHdrLen {
		return 0, syscall.EMSGSIZE
	}
	count = min(count, c.WritableSpace()-rreadHdrLen)
	ws, err := c.Buffers(true)
	if err != nil {
		return 0, err
	}
	_, data := cut(ws, rreadHdrLen)
	data, _ = cut(data, count)
	n := 0
	for n < count {
		k, err := unix.Preadv(fd, data, off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if k == 0 {
			break // the file's end
		}
		n += k
		_, data = cut(data, k)
	}
	var h [rreadHdrLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(rreadHdrLen+n))
	h[4] = tRread
	binary.LittleEndian.PutUint16(h[5:], tag)
	binary.LittleEndian.PutUint32(h[7:], uint32(n))
	if _, err := c.Write(h[:]); err != nil { // the chain's first writable bytes
		return 0, err
	}
	return n, nil
}

// size is the bytes bufs hold.
func size(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// cut returns the first n bytes of bufs (fewer if they hold fewer), and
// the rest, as slices of the same memory.
func cut(bufs [][]byte, n int) (head, rest [][]byte) {
	for i, b := range bufs {
		if n == 0 {
			return head, bufs[i:]
		}
		if len(b) > n {
			return append(head, b[:n]), append([][]byte{b[n:]}, bufs[i+1:]...)
		}
		head = append(head, b)
		n -= len(b)
	}
	return head, nil
}
