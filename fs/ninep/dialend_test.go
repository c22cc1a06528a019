package ninep

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lateDeadline is a client conn on which a deadline in the past (the
// dial context's AfterFunc) takes effect only once released, as when
// that goroutine runs late; the dial's context ends as the Tattach goes
// out (cancel).
type lateDeadline struct {
	net.Conn
	cancel   context.CancelFunc
	attached atomic.Bool
	release  chan struct{}
	once     sync.Once
}

func (c *lateDeadline) Write(b []byte) (int, error) {
	if len(b) > 4 && b[4] == 104 { // Tattach
		c.attached.Store(true)
		c.once.Do(c.cancel)
	}
	return c.Conn.Write(b)
}

func (c *lateDeadline) SetDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		<-c.release
	}
	return c.Conn.SetDeadline(t)
}

// TestDialEndsAtAttach: a dial whose context ends while the attach is
// answered fails; handing out the session would let the context's
// AfterFunc set a past deadline on its conn later, failing the session's
// next request with "i/o timeout".
func TestDialEndsAtAttach(t *testing.T) {
	srv := NewServer(twoDir{&blockFile{ended: make(chan error, 1)}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lc := &lateDeadline{cancel: cancel, release: make(chan struct{})}
	r := NewDialing(Options{Name: "test", DialTimeout: 5 * time.Second, OpTimeout: 5 * time.Second,
		Dial: func(context.Context) (net.Conn, error) {
			c, s := net.Pipe()
			go srv.ServeConn(context.Background(), s, "")
			lc.Conn = c
			return lc, nil
		}})
	defer r.Close()
	s, err := r.dial(ctx)
	close(lc.release)
	if !lc.attached.Load() {
		t.Fatal("no Tattach seen: the test did not end the context during the attach")
	}
	if err != nil {
		return
	}
	time.Sleep(50 * time.Millisecond) // the AfterFunc's deadline lands
	if _, _, err := s.root.Walk([]string{"msg"}); err != nil {
		t.Fatalf("dial = a session, then its first request: %v", err)
	}
}
