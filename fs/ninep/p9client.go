package ninep

import (
	"encoding/binary"
	"io"
	"net"
	"sync"

	"github.com/hugelgupf/p9/p9"
)

// NewClient is p9.NewClient(c) with message size msize, over a
// connection whose writes never fail (writeOnce). The p9 client
// (hugelgupf/p9 v0.3.0, client.go sendRecv) takes each request's
// response slot from a sync.Pool shared by every client in the process
// and, when its send fails, puts the slot back while it is still in the
// connection's pending map. The next read error on that connection
// (another request waiting on it) then leaves its error in the slot's
// buffered done channel, and whichever request of whichever connection
// takes the slot next fails at once with that stale error: a guest
// whose session is closed under a request could fail requests to other
// sandboxes' guests and to the daemon's own clients ("io: read/write on
// closed pipe" in another sandbox). When writes always succeed, a
// request ends only by its reply or by a read error, both after its
// slot left pending.
func NewClient(c io.ReadWriteCloser, msize uint32) (*p9.Client, error) {
	return p9.NewClient(&writeOnce{rwc: c}, p9.WithMessageSize(msize))
}

// writeOnce turns the first write error into a closed connection: that
// write and every later one report success, and reads return the error
// (a read of a connection left open could wait forever). It gathers the
// parts of one message (p9 writes its header, fixed part and payload
// one by one to anything but a net.Conn) and writes them at once,
// vectored on a net.Conn, as p9 does.
type writeOnce struct {
	rwc   io.ReadWriteCloser
	parts net.Buffers // of the message being written
	need  int         // its bytes not yet in parts

	mu  sync.Mutex // protects err: the reader reads it
	err error      // the first write error, nil while none
}

func (w *writeOnce) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *writeOnce) Read(p []byte) (int, error) {
	n, err := w.rwc.Read(p)
	if err != nil {
		if werr := w.failed(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// Write is called by p9 with its send lock held; the parts stay
// untouched until the message's last part (its send's WriteTo) returns.
func (w *writeOnce) Write(p []byte) (int, error) {
	if w.need == 0 && len(p) >= 4 {
		w.need = int(binary.LittleEndian.Uint32(p))
	}
	w.parts = append(w.parts, p)
	w.need -= len(p)
	if w.need > 0 {
		return len(p), nil
	}
	parts := w.parts
	w.parts, w.need = w.parts[:0], 0
	if w.failed() != nil {
		return len(p), nil
	}
	if _, err := parts.WriteTo(w.rwc); err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
		w.rwc.Close()
	}
	return len(p), nil
}

func (w *writeOnce) Close() error { return w.rwc.Close() }
