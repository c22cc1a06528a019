package guest

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
)

// Ending blocking reads on Tflush and Tclunk.
//
// p9 answers Tflush only after the flushed request returns, and calls
// Close on a clunked fid only after its in-flight reads return (they hold
// a reference), so neither reaches a File while its read blocks. The
// agent therefore watches the request stream itself: ctxConn feeds every
// byte the server reads to a sniffer that decodes just the 9P header
// (size[4] type[1] tag[2]) and the first body fields, and
//
//   - records, per goroutine, the Tread or Twrite (tag, fid) that
//     goroutine just read: p9 handles each request in the goroutine that received it
//     (connState.handleRequest: recv, then handle), so a blocking ReadAt
//     finds its own tag and fid by its goroutine id;
//   - on Tflush(oldtag) ends the read with that tag, on Tclunk(fid) or
//     Tremove(fid) every read on that fid; a read that registers after
//     its flush or clunk was seen ends at once.
//
// The cut-short read returns EINTR (a flushed request's reply is dropped
// by the client anyway). See (9P2000) flush(5), and p9 server.go WaitTag.

// 9P2000.L message types (include/net/9p/9p.h, enum p9_msg_t).
const (
	p9Txattrwalk = 30
	p9Tattach    = 104
	p9Tflush     = 108
	p9Twalk      = 110
	p9Tread      = 116
	p9Twrite     = 118
	p9Tclunk     = 120
	p9Tremove    = 122
)

// wireMsg is what a goroutine last read off the connection.
type wireMsg struct {
	typ byte
	tag uint16
	fid uint32
}

// sniffer follows message boundaries in the byte stream. It is used only
// by the goroutine that holds p9's receive lock, so it needs no lock.
type sniffer struct {
	pre  [15]byte // header and first 8 body bytes of the current message
	pos  uint32   // bytes of the current message seen
	size uint32   // its size, once pos >= 4
	off  bool     // lost sync (bad size); p9 drops such a connection anyway
}

func (s *sniffer) feed(c *conn, b []byte) {
	for len(b) > 0 && !s.off {
		if s.pos < 4 {
			n := copy(s.pre[s.pos:4], b)
			s.pos += uint32(n)
			b = b[n:]
			if s.pos < 4 {
				return
			}
			s.size = binary.LittleEndian.Uint32(s.pre[:4])
			if s.size < 7 {
				s.off = true
				return
			}
		}
		want := min(s.size, uint32(len(s.pre)))
		if s.pos < want {
			n := copy(s.pre[s.pos:want], b)
			s.pos += uint32(n)
			b = b[n:]
			if s.pos == want {
				c.sawMessage(s.pre[:want])
			}
			if s.pos < want {
				return
			}
		}
		skip := min(uint32(len(b)), s.size-s.pos)
		s.pos += skip
		b = b[skip:]
		if s.pos == s.size {
			s.pos, s.size = 0, 0
		}
	}
}

// blockedRead is one read waiting in a blocking file.
type blockedRead struct {
	tag    uint16
	fid    uint32
	cancel context.CancelFunc
}

// wireState is the per-connection part of the above; it lives in conn.
type wireState struct {
	mu      sync.Mutex // guards the fields below
	cur     map[uint64]wireMsg
	blocked map[*blockedRead]struct{}
	clunked map[uint32]bool // fids clunked or removed, until reused
	flushed map[uint16]bool // tags flushed, until reused
}

func (w *wireState) init() {
	w.cur = map[uint64]wireMsg{}
	w.blocked = map[*blockedRead]struct{}{}
	w.clunked = map[uint32]bool{}
	w.flushed = map[uint16]bool{}
}

// sawMessage is called with the start of each message as it is read,
// in the goroutine that will handle it.
func (c *conn) sawMessage(p []byte) {
	m := wireMsg{typ: p[4], tag: binary.LittleEndian.Uint16(p[5:7])}
	body := p[7:]
	u32 := func(i int) (uint32, bool) {
		if len(body) < i+4 {
			return 0, false
		}
		return binary.LittleEndian.Uint32(body[i : i+4]), true
	}
	w := &c.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.typ != p9Tflush {
		delete(w.flushed, m.tag)
	}
	switch m.typ {
	case p9Tread, p9Twrite:
		m.fid, _ = u32(0)
	case p9Tclunk, p9Tremove:
		if fid, ok := u32(0); ok {
			w.clunked[fid] = true
			for b := range w.blocked {
				if b.fid == fid {
					b.cancel()
				}
			}
		}
	case p9Tflush:
		if len(body) >= 2 {
			old := binary.LittleEndian.Uint16(body[:2])
			w.flushed[old] = true
			for b := range w.blocked {
				if b.tag == old {
					b.cancel()
				}
			}
		}
	case p9Twalk, p9Txattrwalk:
		if fid, ok := u32(4); ok {
			delete(w.clunked, fid)
		}
	case p9Tattach:
		if fid, ok := u32(0); ok {
			delete(w.clunked, fid)
		}
	}
	w.cur[goid()] = m
}

// blocking returns the context a blocking read (or write) should wait with: it ends
// with the connection, or when the read's tag is flushed or its fid
// clunked. Call done when the read returns.
func (c *conn) blocking() (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	w := &c.wire
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.cur[goid()]
	if !ok || m.typ != p9Tread && m.typ != p9Twrite {
		return ctx, cancel // not called from a Tread/Twrite handler (tests)
	}
	if w.clunked[m.fid] || w.flushed[m.tag] {
		cancel()
		return ctx, cancel
	}
	b := &blockedRead{tag: m.tag, fid: m.fid, cancel: cancel}
	w.blocked[b] = struct{}{}
	return ctx, func() {
		w.mu.Lock()
		delete(w.blocked, b)
		w.mu.Unlock()
		cancel()
	}
}

// goid returns the current goroutine's id, parsed from the first line of
// its stack trace ("goroutine 123 [running]:").
func goid() uint64 {
	var buf [32]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return 0
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
