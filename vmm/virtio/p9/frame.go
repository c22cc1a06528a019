package p9

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"syscall"
)

// 9P message types the device looks at (9P2000.L, include/net/9p/9p.h).
const (
	tRlerror  = 7   // P9_RLERROR
	tTversion = 100 // P9_TVERSION
	tTflush   = 108 // P9_TFLUSH
	tRflush   = 109 // P9_RFLUSH
	tTgetattr = 24  // P9_TGETATTR
	tRgetattr = 25  // P9_RGETATTR
	tTwalk    = 110 // P9_TWALK
	tRwalk    = 111 // P9_RWALK
	tTclunk   = 120 // P9_TCLUNK
	tRclunk   = 121 // P9_RCLUNK
)

// headerLen is size[4] type[1] tag[2].
const headerLen = 7

// rlerrorLen is an Rlerror: the header and ecode[4].
const rlerrorLen = headerLen + 4

// header is a parsed frame header.
type header struct {
	size uint32
	typ  uint8
	tag  uint16
}

func parseHeader(b []byte) header {
	return header{size: binary.LittleEndian.Uint32(b), typ: b[4], tag: binary.LittleEndian.Uint16(b[5:])}
}

// peekHeader returns the next frame's header from br, still buffered,
// after checking its size (read first, so a bad size ends the session
// without waiting for the rest of the header): at least a header, at
// most max.
func peekHeader(br *bufio.Reader, max uint32) (header, error) {
	sb, err := br.Peek(4)
	if err != nil {
		return header{}, err
	}
	if size := binary.LittleEndian.Uint32(sb); size < headerLen || size > max {
		return header{}, fmt.Errorf("server frame of %d bytes (max %d)", size, max)
	}
	hb, err := br.Peek(headerLen)
	if err != nil {
		return header{}, err
	}
	return parseHeader(hb), nil
}

// replyHeader is a reply frame's header for tag, for a body of n bytes
// the caller appends.
func replyHeader(typ uint8, tag uint16, n int) []byte {
	b := make([]byte, headerLen, headerLen+n)
	binary.LittleEndian.PutUint32(b, uint32(headerLen+n))
	b[4] = typ
	binary.LittleEndian.PutUint16(b[5:], tag)
	return b
}

// rlerror is the Rlerror frame for tag with errno e.
func rlerror(tag uint16, e syscall.Errno) []byte {
	return binary.LittleEndian.AppendUint32(replyHeader(tRlerror, tag, 4), uint32(e))
}

// flushOldTag is the oldtag[2] of a Tflush frame b, or false if b is too
// short to hold it.
func flushOldTag(b []byte) (uint16, bool) {
	if len(b) < headerLen+2 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(b[headerLen:]), true
}
