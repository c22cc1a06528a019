package ninep

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"

	"sandfs/ctl/cred"
)

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

func replyFrame(typ uint8, tag uint16, body string) []byte {
	b := make([]byte, 7, 7+len(body))
	binary.LittleEndian.PutUint32(b, uint32(7+len(body)))
	b[4] = typ
	binary.LittleEndian.PutUint16(b[5:], tag)
	return append(b, body...)
}

func sum(v []int) (n int) {
	for _, x := range v {
		n += x
	}
	return n
}

// tags lists the tags of the replies in b.
func tags(t *testing.T, b []byte) []uint16 {
	t.Helper()
	var out []uint16
	for len(b) > 0 {
		if len(b) < 7 {
			t.Fatalf("%d bytes left: a cut reply", len(b))
		}
		size := binary.LittleEndian.Uint32(b)
		out = append(out, binary.LittleEndian.Uint16(b[5:]))
		b = b[size:]
	}
	return out
}

// TestRflushAfterFlushedReply: an Rflush that p9 sends before the reply
// of the request it flushed (guest TestFlushEndsBlockedRead saw it, one
// run in forty under load) is held and written right after that reply,
// whole, however p9 cuts its writes; an Rflush of a request already
// answered, or of a tag never seen, passes at once.
func TestRflushAfterFlushedReply(t *testing.T) {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	cc, sc := net.Pipe()
	defer cc.Close()
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	defer cn.cancel()
	var out bytes.Buffer
	w := &replyWriter{w: nopCloser{&out}, c: cn}
	// write passes b in pieces of the sizes given, then the rest.
	write := func(b []byte, pieces ...int) {
		t.Helper()
		for _, k := range append(pieces, len(b)-sum(pieces)) {
			if _, err := w.Write(b[:k]); err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
	}

	cn.sawRequest(4) // Tread
	cn.sawRequest(5) // Tflush of 4
	cn.sawFlush(5, 4)
	write(rflushFrame(5), 3) // p9 answers the flush first, its header cut
	if out.Len() != 0 {
		t.Fatalf("the Rflush went out before the flushed read's reply: % x", out.Bytes())
	}
	write(replyFrame(msgTread+1, 4, "\x02\x00\x00\x00hi"), 7, 2)
	if got := tags(t, out.Bytes()); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("replies by tag %v; want the read's (4), then the Rflush (5)", got)
	}

	out.Reset()
	cn.sawRequest(6)
	write(replyFrame(msgTread+1, 6, "\x00\x00\x00\x00"))
	cn.sawRequest(7)
	cn.sawFlush(7, 6) // 6 answered already
	cn.sawRequest(8)
	cn.sawFlush(8, 99) // never seen
	write(rflushFrame(7))
	write(rflushFrame(8))
	if got := tags(t, out.Bytes()); len(got) != 3 || got[1] != 7 || got[2] != 8 {
		t.Fatalf("replies by tag %v; want 6, 7, 8 in the order written", got)
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if o := cn.flushes; len(o.inflight)+len(o.waits)+len(o.held) != 0 {
		t.Errorf("state left: %d in flight, %d waits, %d held", len(o.inflight), len(o.waits), len(o.held))
	}
}
