package ninep

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"sandfs/ctl/cred"
)

// writeLog records each Write it is given.
type writeLog struct{ writes [][]byte }

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func (w *writeLog) Close() error { return nil }

// TestReplyOneWrite: however p9 cuts a reply (its header, then body and
// payload), the connection gets it in one write, once it is whole: the
// VMM's device reading the other end wakes once per reply (a payload
// over replyKeep follows its header part in a second write, uncopied).
func TestReplyOneWrite(t *testing.T) {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	_, sc := net.Pipe()
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	defer cn.cancel()
	out := &writeLog{}
	w := &replyWriter{w: out, c: cn}
	read := replyFrame(msgTread+1, 3, "\x05\x00\x00\x00hello")
	clunk := replyFrame(msgTclunk+1, 4, "")
	big := replyFrame(msgTread+1, 5, string(make([]byte, 100<<10)))
	for _, cut := range [][]int{{7, 4}, {3, 4, 4}, {7}} { // p9's: header, count, payload
		b := read
		for _, k := range append(cut, len(b)-sum(cut)) {
			w.Write(b[:k])
			b = b[k:]
		}
	}
	w.Write(clunk)
	w.Write(big[:7])
	w.Write(big[7:11])
	w.Write(big[11:])
	want := [][]byte{read, read, read, clunk, big[:11], big[11:]} // over replyKeep: its header part, then its payload
	if len(out.writes) != len(want) {
		t.Fatalf("%d writes; want %d", len(out.writes), len(want))
	}
	for i, b := range out.writes {
		if !bytes.Equal(b, want[i]) {
			t.Errorf("write %d: %d bytes, not reply %d", i, len(b), i)
		}
	}
}

// readLog counts the reads a frameReader asks of its connection.
type readLog struct {
	r     io.Reader
	reads int
}

func (r *readLog) Read(p []byte) (int, error) {
	r.reads++
	return r.r.Read(p)
}

func (r *readLog) Close() error { return nil }

// TestFrameOneRead: a small request's size and body come in one read of
// the connection, and so do requests sent back to back.
func TestFrameOneRead(t *testing.T) {
	srv := NewServer(oneDir{"hello", textFile("hi\n")}, nil)
	_, sc := net.Pipe()
	cn := newConn(context.Background(), srv, sc, "", cred.Nobody, nil)
	defer cn.cancel()
	cn.authed.Store(true)
	clunk := replyFrame(msgTclunk, 1, "\x07\x00\x00\x00")
	stream := bytes.Join([][]byte{clunk, clunk, clunk}, nil)
	rl := &readLog{r: bytes.NewReader(stream)}
	fr := newFrameReader(rl, cn)
	got, err := io.ReadAll(io.LimitReader(fr, int64(len(stream))))
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("read %d bytes (%v); want the %d sent", len(got), err, len(stream))
	}
	if rl.reads != 1 {
		t.Errorf("%d reads of the connection for three small frames sent together; want 1", rl.reads)
	}
}
