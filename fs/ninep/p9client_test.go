package ninep

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// fake9P answers Tversion and, unless hang, Tattach, on c; each Tattach
// it reads is sent on got.
func fake9P(c net.Conn, hang bool, got chan<- struct{}) {
	defer c.Close()
	for {
		var hdr [7]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.LittleEndian.Uint32(hdr[:])-7)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		var r []byte
		switch hdr[4] {
		case 100: // Tversion: msize[4] version[s]
			r = append(binary.LittleEndian.AppendUint32(nil, binary.LittleEndian.Uint32(body)), 8, 0)
			r = append(r, "9P2000.L"...)
		case 104: // Tattach
			if got != nil {
				got <- struct{}{}
			}
			if hang {
				continue
			}
			r = make([]byte, 13) // qid
			r[0] = 0x80
		default:
			return
		}
		f := binary.LittleEndian.AppendUint32(nil, uint32(7+len(r)))
		f = append(append(f, hdr[4]+1, hdr[5], hdr[6]), r...)
		if _, err := c.Write(f); err != nil {
			return
		}
	}
}

// breakableConn is a connection whose writes fail once broken is set.
type breakableConn struct {
	net.Conn
	broken atomic.Bool
}

func (b *breakableConn) Write(p []byte) (int, error) {
	if b.broken.Load() {
		return 0, errors.New("write: broken")
	}
	return b.Conn.Write(p)
}

// TestClientFailedSendIsolated: a request whose send fails while another
// request waits on the same connection (a session closed under it: a
// hostile or dying guest) must not fail a request of another connection
// (hugelgupf/p9 shares its response slots between clients; NewClient).
func TestClientFailedSendIsolated(t *testing.T) {
	hc, hs := net.Pipe()
	go fake9P(hs, false, nil)
	healthy, err := NewClient(hc, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	for round := range 20 {
		bc, bs := net.Pipe()
		got := make(chan struct{}, 2)
		go fake9P(bs, true, got)
		conn := &breakableConn{Conn: bc}
		bad, err := NewClient(conn, 8192)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan error, 1)
		go func() { _, err := bad.Attach("w"); waiting <- err }()
		<-got // the first request waits for its reply
		conn.broken.Store(true)
		_, serr := bad.Attach("s")
		bc.Close()
		if werr := <-waiting; werr == nil || serr == nil {
			t.Fatalf("round %d: requests on a broken connection = %v, %v; want errors", round, werr, serr)
		}
		if _, err := healthy.Attach(""); err != nil {
			t.Fatalf("round %d: request on another connection = %v; want it unaffected", round, err)
		}
	}
}
