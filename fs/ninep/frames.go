package ninep

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"
)

// 9P2000.L requests and replies that the connection watches (p9/p9.go).
const (
	msgRlerror      = 7
	msgTlopen       = 12
	msgRlopen       = 13
	msgTlcreate     = 14
	msgRlcreate     = 15
	msgTxattrcreate = 32
	msgTversion     = 100
	msgTauth        = 102
	msgTattach      = 104
	msgRattach      = 105
	msgTflush       = 108
	msgTwalk        = 110
	msgRwalk        = 111
	msgTread        = 116
	msgTwrite       = 118
	msgTclunk       = 120
	msgTremove      = 122
	msgTwalkgetattr = 126
	msgRwalkgetattr = 127
)

// maxFrame bounds a frame once the client has attached: the agreed
// msize at most (p9 refuses larger frames anyway).
const maxFrame = maxMsize

// frameReader passes a connection's bytes to the p9 server one frame at a
// time and shows each request to its conn first. A frame on the wire:
//
//	size[4] type[1] tag[2] body[size-7]     (little-endian, size counts itself)
//
// Before the client has attached it enforces the conn's limits (see
// limits): a frame too big, too many frames or a request type other than
// the handshake's ends the connection. When the connection ends it
// cancels the conn's context, so reads blocked in the tree end before p9
// waits for them.
//
// p9 reads with one goroutine at a time (its recvMu), so the fields need
// no lock.
type frameReader struct {
	r       *bufio.Reader // rc's bytes, read frameBuffer at a time
	rc      io.ReadCloser
	c       *conn
	frame   []byte
	pos     int
	preAuth int // frames read before attach
	// clunk is the wait of the ordered Tclunk read last (clunkorder.go):
	// the next frame is read once it is closed.
	clunk <-chan struct{}
}

// eofDelay holds back the end of a connection from p9. p9 v0.3.0 starts
// a spare receiving goroutine after each request and counts it in its
// WaitGroup only once it runs; if the goroutine that sees the end of the
// connection gets there first, p9 tears the connection down under the
// spare one (a data race, or "WaitGroup is reused" panic; fixed upstream
// in hugelgupf/p9 PR #105, not in any release). Delaying the error lets
// the spare goroutine start and register first; ServeConn recovers the
// panic should it still happen.
const eofDelay = 20 * time.Millisecond

// Read implements io.Reader.
func (f *frameReader) Read(p []byte) (int, error) {
	if f.pos == len(f.frame) {
		if err := f.next(); err != nil {
			f.c.cancel()
			time.Sleep(eofDelay)
			return 0, err
		}
	}
	n := copy(p, f.frame[f.pos:])
	f.pos += n
	return n, nil
}

// frameBuffer is how much a frameReader asks its connection for at a
// time: a small request's header and body come in one read (two before:
// the size, then the rest), and so do requests a client sends back to
// back. Larger frames (a Twrite's data) are read past it, straight into
// the frame.
const frameBuffer = 8 << 10

// newFrameReader reads c's frames from rc.
func newFrameReader(rc io.ReadCloser, c *conn) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(rc, frameBuffer), rc: rc, c: c}
}

// Close implements io.Closer.
func (f *frameReader) Close() error { return f.rc.Close() }

func (f *frameReader) next() error {
	if f.clunk != nil {
		select {
		case <-f.clunk:
		case <-f.c.ctx.Done():
		}
		f.clunk = nil
	}
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	authed := f.c.authed.Load()
	limit := uint32(maxFrame)
	if !authed {
		limit = f.c.lim.preAuthFrame
		if f.preAuth++; f.preAuth > f.c.lim.preAuthFrames {
			return f.c.refuse(fmt.Errorf("9p: more than %d requests before attach", f.c.lim.preAuthFrames))
		}
	}
	if size < 7 || size > limit {
		return f.c.refuse(fmt.Errorf("9p: bad frame size %d (max %d)", size, limit))
	}
	frame := make([]byte, size)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(f.r, frame[4:]); err != nil {
		return err
	}
	if frame[4] == msgTpassreads && f.preAuth == 1 && size == 7 {
		// The client's first frame may ask for passed reads
		// (passread.go); p9 never sees it, and it has no reply.
		f.c.passReadsAsked()
		return f.next()
	}
	if frame[4] == msgTorderclunks && !authed && f.preAuth <= 2 && size == 7 {
		// The client's first or second frame may ask for ordered
		// clunks (clunkorder.go); p9 never sees it.
		if err := f.c.orderClunksAsked(); err != nil {
			return err
		}
		return f.next()
	}
	if frame[4] == msgTpassfiles && !authed && f.preAuth <= 3 && size == 7 {
		// One of the client's first three frames may ask for passed
		// files (passfile.go); p9 never sees it, and it has no reply.
		f.c.passFilesAsked()
		return f.next()
	}
	if typ := frame[4]; !authed && !preAuthType(typ) {
		return f.c.refuse(fmt.Errorf("9p: request type %d before attach", typ))
	}
	clampMsize(frame)
	f.frame, f.pos = frame, 0
	f.clunk = f.c.observe(frame)
	return nil
}

// clampMsize lowers the msize of a Tversion frame to maxMsize:
//
//	size[4] Tversion[1] tag[2] msize[4] version[s]
func clampMsize(frame []byte) {
	if frame[4] != msgTversion || len(frame) < 11 {
		return
	}
	if binary.LittleEndian.Uint32(frame[7:]) > maxMsize {
		binary.LittleEndian.PutUint32(frame[7:], maxMsize)
	}
}

// observe decodes the few requests the conn cares about, and rewrites
// the offset of a Tread or Twrite (conn.sawRead). Malformed frames are
// left to p9 to refuse. It returns what to wait on before the next frame
// is read: an ordered Tclunk's reply (clunkorder.go), or nil.
func (c *conn) observe(frame []byte) (clunk <-chan struct{}) {
	d := decoder{b: frame[4:], ok: true}
	typ := d.u8()
	tag := d.u16()
	fresh := c.sawRequest(tag)
	switch typ {
	case msgTattach:
		fid := d.u32()
		d.u32() // afid
		d.str() // uname
		aname := d.str()
		if d.ok && !c.sawAttach(tag, fid, aname) {
			refuseFrame(frame)
		}
	case msgTwalk, msgTwalkgetattr:
		fid, newfid := d.u32(), d.u32()
		n := int(d.u16())
		names := make([]string, 0, min(n, 16))
		for i := 0; i < n && d.ok; i++ {
			names = append(names, d.str())
		}
		if d.ok && !c.sawWalk(tag, fid, newfid, names) {
			refuseFrame(frame)
		}
	case msgTlopen, msgTlcreate:
		if fid := d.u32(); d.ok && !c.sawOpen(tag, fid) {
			refuseFrame(frame)
		}
	case msgTread, msgTwrite:
		// size[4] type[1] tag[2] fid[4] offset[8] ...: the offset p9
		// decodes becomes the tag's (conn.begin).
		fid, off := d.u32(), d.u64()
		if d.ok {
			binary.LittleEndian.PutUint64(frame[11:19], c.sawRead(tag, fid, off))
		}
	case msgTxattrcreate:
		if fid := d.u32(); d.ok {
			c.sawXattrCreate(fid)
		}
	case msgTflush:
		if old := d.u16(); d.ok {
			c.sawFlush(tag, old)
		}
	case msgTclunk, msgTremove:
		if fid := d.u32(); d.ok {
			c.sawClunk(fid)
			if typ == msgTclunk {
				clunk = c.orderClunk(tag, fresh)
			}
		}
	}
	return clunk
}

// replyWriter passes the p9 server's replies to the connection and shows
// each reply's type and tag to its conn before the reply's first byte
// leaves, so the conn learns which fids p9 created before the client can
// use them. It also puts an Rflush after the reply of the request it
// flushed (flushorder.go). p9 writes a reply as its 7-byte header, then
// its body and payload, in separate Writes, one reply at a time (its
// sendMu); replyWriter keeps a reply's bytes until the Write that
// completes it, and sends the reply in one write (two for a payload over
// replyKeep: the header part, then the payload). (Passed on as they came,
// each reply was two or three writes, and the VMM's device, reading the
// other end, woke for each: the header, then the rest.)
type replyWriter struct {
	w    io.WriteCloser
	c    *conn
	buf  []byte      // the current reply's bytes so far, its header first
	size uint32      // the current reply's size, once its header is whole
	tag  uint16      // the current reply's
	pass *passedRead // the current reply's passed read: an Rreadfd goes in its place
	open bool        // the current reply is an Rlopen or Rlcreate that may pass its file (passfile.go)
	// refused: the current reply is the Rlerror of a request refused
	// for a bound, sent with EMFILE (fidlimit.go).
	refused bool
}

// replyKeep bounds the buffer a replyWriter keeps between replies, and
// the payload it copies to send a reply in one write.
const replyKeep = 64 << 10

// Write implements io.Writer.
func (w *replyWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(w.buf) < 7 {
			k := min(7-len(w.buf), len(p))
			w.buf, p = append(w.buf, p[:k]...), p[k:]
			if len(w.buf) < 7 {
				break
			}
			if done, err := w.header(); err != nil {
				return 0, err
			} else if done {
				continue
			}
		}
		rest := int(w.size) - len(w.buf)
		if len(p) < rest {
			w.buf, p = append(w.buf, p...), nil
			break
		}
		if err := w.send(p[:rest]); err != nil {
			return 0, err
		}
		p = p[rest:]
	}
	return n, nil
}

// header shows the whole header in w.buf to the conn and reports done
// for a reply that is its header alone: sent, or held (an Rflush that
// must wait for another reply; replied writes it).
func (w *replyWriter) header() (done bool, err error) {
	typ, tag := w.buf[4], binary.LittleEndian.Uint16(w.buf[5:])
	w.tag, w.size = tag, max(binary.LittleEndian.Uint32(w.buf), 7)
	hold, pass, refused := w.c.sawReply(typ, tag)
	w.refused = refused
	if pass != nil && (typ != msgRread || w.size == 7) {
		unix.Close(pass.fd) // not read after all (an Rlerror)
		pass = nil
	}
	w.pass = pass
	w.open = (typ == msgRlopen || typ == msgRlcreate) && w.size == rlopenLen && w.c.filesOn.Load()
	if hold && w.size == 7 {
		w.buf = w.buf[:0]
		return true, nil
	}
	if w.size == 7 {
		return true, w.send(nil)
	}
	return false, nil
}

// send writes the current reply, w.buf then last: one write when last
// is at most replyKeep bytes (copied after w.buf), else w.buf's and
// last's (a large read's data is not copied again), and the Rflush
// replies that waited for it. Plain writes, not a writev: the race
// detector sees a write(2) before the read(2) of its bytes in this
// process (package syscall's ioSync), not a writev, and tests that
// wait on a reply over a socket rely on it.
func (w *replyWriter) send(last []byte) error {
	var err error
	if w.pass != nil {
		err = sendPassed(w.c.unix, w.tag, w.pass)
		w.pass = nil
	} else if w.open && len(w.buf)+len(last) == rlopenLen {
		w.buf = append(w.buf, last...)
		if fd := w.c.passOpen(w.buf); fd >= 0 {
			err = sendOpenFD(w.c.unix, w.buf, fd)
		} else {
			_, err = w.w.Write(w.buf)
		}
	} else if len(last) <= replyKeep {
		w.buf = append(w.buf, last...)
		if w.refused {
			emfile(w.buf)
		}
		_, err = w.w.Write(w.buf)
	} else if _, err = w.w.Write(w.buf); err == nil {
		_, err = w.w.Write(last)
	}
	if cap(w.buf) > replyKeep {
		w.buf = nil
	}
	w.buf = w.buf[:0]
	if err != nil {
		return err
	}
	return w.replied(w.tag)
}

// replied writes the Rflush replies that waited for the reply with tag,
// now all written, and those that waited for them.
func (w *replyWriter) replied(tag uint16) error {
	for _, ft := range w.c.releaseFlushes(tag) {
		if _, err := w.w.Write(rflushFrame(ft)); err != nil {
			return err
		}
		if err := w.replied(ft); err != nil {
			return err
		}
	}
	return nil
}

// Close implements io.Closer. A passed read whose reply was cut off
// with the connection closes its descriptor here.
func (w *replyWriter) Close() error {
	if w.pass != nil {
		unix.Close(w.pass.fd)
		w.pass = nil
	}
	return w.w.Close()
}

// decoder reads 9P's little-endian integers and u16-counted strings; ok
// turns false at the first short read (and stays false).
type decoder struct {
	b   []byte
	bad bool
	ok  bool // !bad, kept as a field so callers read d.ok
}

func (d *decoder) take(n int) []byte {
	if d.bad || len(d.b) < n {
		d.bad, d.ok = true, false
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *decoder) str() string { return string(d.take(int(d.u16()))) }
