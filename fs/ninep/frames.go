package ninep

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// 9P2000.L message types that the connection watches (p9/p9.go).
const (
	msgTattach      = 104
	msgTflush       = 108
	msgTwalk        = 110
	msgTread        = 116
	msgTclunk       = 120
	msgTremove      = 122
	msgTwalkgetattr = 126
)

// maxFrame bounds a frame the reader will buffer; p9 refuses larger ones
// anyway (its maximumLength is 1 MiB).
const maxFrame = 4 << 20

// frameReader passes a connection's bytes to the p9 server one frame at a
// time and shows each request to its conn first. A frame on the wire:
//
//	size[4] type[1] tag[2] body[size-7]     (little-endian, size counts itself)
//
// When the connection ends it cancels the conn's context, so reads
// blocked in the tree end before p9 waits for them.
type frameReader struct {
	r     io.ReadCloser
	c     *conn
	frame []byte
	pos   int
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

// Close implements io.Closer.
func (f *frameReader) Close() error { return f.r.Close() }

func (f *frameReader) next() error {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size < 7 || size > maxFrame {
		return fmt.Errorf("9p: bad frame size %d", size)
	}
	frame := make([]byte, size)
	copy(frame, hdr[:])
	if _, err := io.ReadFull(f.r, frame[4:]); err != nil {
		return err
	}
	f.frame, f.pos = frame, 0
	f.observe(frame)
	return nil
}

// observe decodes the few requests the conn cares about. Malformed
// frames are left to p9 to refuse.
func (f *frameReader) observe(frame []byte) {
	d := decoder{b: frame[4:], ok: true}
	typ := d.u8()
	tag := d.u16()
	switch typ {
	case msgTattach:
		fid := d.u32()
		d.u32() // afid
		d.str() // uname
		aname := d.str()
		if d.ok {
			f.c.sawAttach(fid, aname)
		}
	case msgTwalk, msgTwalkgetattr:
		fid, newfid := d.u32(), d.u32()
		n := int(d.u16())
		names := make([]string, 0, n)
		for i := 0; i < n && d.ok; i++ {
			names = append(names, d.str())
		}
		if d.ok {
			f.c.sawWalk(fid, newfid, names)
		}
	case msgTread:
		if fid := d.u32(); d.ok {
			f.c.sawRead(tag, fid)
		}
	case msgTflush:
		if old := d.u16(); d.ok {
			f.c.sawFlush(old)
		}
	case msgTclunk, msgTremove:
		if fid := d.u32(); d.ok {
			f.c.sawClunk(fid)
		}
	}
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
func (d *decoder) str() string { return string(d.take(int(d.u16()))) }
