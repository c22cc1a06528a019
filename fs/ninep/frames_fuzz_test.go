package ninep

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"sandfs/ctl/cred"
)

// FuzzFrames feeds any byte stream to the frame decoder of a connection
// (attached or not) and any reply stream to its reply scanner. Contract:
// no panic; every frame passed on is whole and within the connection's
// limits (before attach: at most preAuthFrames frames of preAuthFrame
// bytes, handshake types only); a Tversion passed on asks at most
// maxMsize; a Tread or Twrite passed on carries its tag in place of its
// offset (but on an xattr fid); a fid path is recorded only for a reply
// that says a fid was created, never more than one per such reply.
// Seeds are in testdata/fuzz/FuzzFrames.
func FuzzFrames(f *testing.F) {
	attach := frame(tattch, 1, uint32(1), noFID, "", testToken, noFID)
	walk := frame(twalk, 2, uint32(1), uint32(2), uint16(2), "sandboxes", "t")
	for _, in := range [][]byte{
		tversion,
		frame(tver, noTag, uint32(4<<20), "9P2000.L"),
		cat(tversion, attach, walk, frame(tread, 3, uint32(2), uint64(0), uint32(100)), frame(tflush, 4, uint16(3)), frame(120, 5, uint32(2))),
		cat(tversion, walk),
		cat(frame(msgTpassreads, noTag), tversion, attach, walk, frame(tread, 3, uint32(2), uint64(0), uint32(100<<10))),
		attach[:9],
		{0xff, 0xff, 0xff, 0xff, tver, 0, 0},
		{6, 0, 0, 0, tver, 0},
	} {
		replies := cat(frame(rver, noTag, uint32(8192), "9P2000.L"), frame(rattch, 1, make([]byte, 13)), frame(rwalk, 2, uint16(0)))
		f.Add(in, replies, false)
		f.Add(in, replies, true)
	}
	f.Fuzz(func(t *testing.T, in, replies []byte, authed bool) {
		cc, sc := net.Pipe()
		defer cc.Close()
		defer sc.Close()
		srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
		cn := newConn(context.Background(), srv, sc, testToken, cred.Nobody, nil)
		defer cn.cancel()
		if authed {
			cn.authenticated()
		}
		fr := newFrameReader(io.NopCloser(bytes.NewReader(in)), cn)
		frames := 0
		for fr.next() == nil {
			frames++
			fb := fr.frame
			size := binary.LittleEndian.Uint32(fb)
			if int(size) != len(fb) || size < 7 {
				t.Fatalf("frame %d: size field %d, %d bytes passed on", frames, size, len(fb))
			}
			if authed && size > maxFrame {
				t.Fatalf("frame %d: %d bytes after attach; max %d", frames, size, maxFrame)
			}
			if !authed && (size > cn.lim.preAuthFrame || frames > cn.lim.preAuthFrames || !preAuthType(fb[4])) {
				t.Fatalf("frame %d before attach: type %d, %d bytes; want at most %d frames of %d bytes, handshake types", frames, fb[4], size, cn.lim.preAuthFrames, cn.lim.preAuthFrame)
			}
			if fb[4] == tver && len(fb) >= 11 && binary.LittleEndian.Uint32(fb[7:]) > maxMsize {
				t.Fatalf("Tversion passed on with msize %d; max %d", binary.LittleEndian.Uint32(fb[7:]), maxMsize)
			}
			if (fb[4] == msgTread || fb[4] == msgTwrite) && len(fb) >= 19 {
				fid, off := binary.LittleEndian.Uint32(fb[7:]), binary.LittleEndian.Uint64(fb[11:])
				cn.mu.Lock()
				xattr := cn.xattrFids[fid]
				cn.mu.Unlock()
				if !xattr && off != offsetTag|uint64(binary.LittleEndian.Uint16(fb[5:])) && off != offsetTagBad {
					t.Fatalf("frame %d: type %d passed on with offset %#x; want its tag's", frames, fb[4], off)
				}
			}
		}
		// The replies, cut into uneven writes as a writer may.
		w := &replyWriter{w: nopWriteCloser{}, c: cn}
		for rest := replies; len(rest) > 0; {
			n := min(len(rest), 1+int(rest[0])%11)
			w.Write(rest[:n])
			rest = rest[n:]
		}
		created := countReplies(replies, msgRattach, msgRwalk, msgRwalkgetattr)
		cn.mu.Lock()
		defer cn.mu.Unlock()
		if len(cn.fidPaths) > created {
			t.Fatalf("%d fid paths recorded from %d replies that create a fid", len(cn.fidPaths), created)
		}
	})
}

// cat concatenates frames.
func cat(fs ...[]byte) []byte { return bytes.Join(fs, nil) }

// countReplies counts the reply headers of stream whose type is in
// types, reading the stream as replyWriter does.
func countReplies(stream []byte, types ...uint8) int {
	n := 0
	for len(stream) >= 7 {
		size := binary.LittleEndian.Uint32(stream)
		for _, t := range types {
			if stream[4] == t {
				n++
			}
		}
		size = max(size, 7) // as replyWriter: a header, then the next
		if uint64(size) > uint64(len(stream)) {
			break
		}
		stream = stream[size:]
	}
	return n
}

type nopWriteCloser struct{}

func (nopWriteCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriteCloser) Close() error                { return nil }
