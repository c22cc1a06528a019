package ninep

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	sfs "sandfs/fs"
)

// gateFile is a file whose handles' Close waits for release (after
// telling closing).
type gateFile struct{ closing, release chan struct{} }

func (f *gateFile) Stat(context.Context) (sfs.Attr, error) { return sfs.Attr{Mode: 0o444}, nil }
func (f *gateFile) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return gateHandle{f}, nil
}

type gateHandle struct{ f *gateFile }

func (h gateHandle) Read(context.Context, []byte, int64) (int, error)  { return 0, nil }
func (h gateHandle) Write(context.Context, []byte, int64) (int, error) { return 0, syscall.EBADF }
func (h gateHandle) Close() error {
	h.f.closing <- struct{}{}
	<-h.f.release
	return nil
}

// TestOrderedClunks: a server that agreed to ordered clunks reads
// nothing after a Tclunk until the clunk is done (here its file's Close
// waits): not a Tflush, which needs no fid (p9 holds its fid table's
// lock while a clunk closes a file, so a walk would wait either way),
// nor a Twalk that reuses the fid at once, which then succeeds. A server
// that did not agree says nothing to Torderclunks and answers the flush
// while the clunk runs.
func TestOrderedClunks(t *testing.T) {
	for _, agree := range []bool{true, false} {
		t.Run(map[bool]string{true: "agreed", false: "not agreed"}[agree], func(t *testing.T) {
			f := &gateFile{closing: make(chan struct{}, 1), release: make(chan struct{})}
			srv := NewServer(oneDir{"f", f}, nil)
			srv.SetOrderClunks(agree)
			cc, sc := unixPair(t)
			go srv.ServeConn(context.Background(), sc, "")
			r := &raw{t: t, c: cc}
			r.send(msgTorderclunks, noTag)
			if agree {
				r.expect(msgRorderclunks, noTag)
			}
			r.open(64<<10, "f") // Rversion first if not agreed: Torderclunks had no reply
			r.send(tclunk, 4, uint32(2))
			r.send(tflush, 5, uint16(77))
			r.send(twalk, 6, uint32(1), uint32(2), uint16(0))
			select {
			case <-f.closing:
			case <-time.After(5 * time.Second):
				t.Fatal("the clunk did not close the file")
			}
			cc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			var b [1]byte
			_, err := cc.Read(b[:])
			early := err == nil
			if ne, ok := err.(net.Error); err != nil && !(ok && ne.Timeout()) && !os.IsTimeout(err) {
				t.Fatal(err)
			}
			if early == agree {
				t.Fatalf("a reply came while the clunk ran: %v; want %v", early, !agree)
			}
			close(f.release)
			if !agree {
				return
			}
			r.expect(rclunk, 4)
			got := map[uint16]uint8{}
			for range 2 {
				typ, tag, _ := r.recv()
				got[tag] = typ
			}
			if got[5] != rflush || got[6] != rwalk {
				t.Fatalf("replies %v; want Rflush for tag 5, Rwalk for 6", got)
			}
			r.send(tclunk, 7, uint32(2)) // the walk's fid, not the clunked one
			r.expect(rclunk, 7)
		})
	}
}
