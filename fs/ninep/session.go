package ninep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/msg"
)

// session is one 9P connection of a Remote.
type session struct {
	conn io.Closer // the connection under cl
	cl   *p9.Client
	root p9.File
	dead chan struct{} // closed by kill, or when the connection fails

	abandoned atomic.Int32 // requests given up by their caller, still unanswered

	once sync.Once
	why  error // why it died; set once, before dead is closed
}

// kill closes the connection; requests in flight fail.
func (s *session) kill(why error) {
	s.once.Do(func() {
		s.why = why
		close(s.dead)
	})
	s.conn.Close() // (p9's Client.Close is just this)
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// maxIdle bounds the private sessions kept for reuse.
const maxIdle = 4

// attach negotiates the version and attaches over c, within
// DialTimeout when c can take a deadline. c is closed on failure.
func (r *Remote) attach(c io.ReadWriteCloser) (*session, error) {
	msize := r.opt.Msize
	if msize == 0 {
		msize = iounit + 4096
	}
	s := &session{conn: c, dead: make(chan struct{})}
	nc, _ := c.(net.Conn)
	if nc != nil && r.opt.DialTimeout > 0 {
		nc.SetDeadline(time.Now().Add(r.opt.DialTimeout))
	}
	var root p9.File
	err := Guard(func() error {
		cl, err := NewClient(c, msize)
		if err != nil {
			return fmt.Errorf("9p version: %w", err)
		}
		s.cl = cl
		if root, err = cl.Attach(r.opt.Aname); err != nil {
			return fmt.Errorf("9p attach: %w", toErrno(err))
		}
		return nil
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	if nc != nil {
		nc.SetDeadline(time.Time{})
	}
	s.root = root
	return s, nil
}

// watchedConn calls end once, at the first read or write error (the
// connection ended): a Remote over one connection (NewRemote) closes then,
// so that Done tells at once.
type watchedConn struct {
	io.ReadWriteCloser
	end  func()
	once sync.Once
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Read(p)
	if err != nil {
		w.once.Do(w.end)
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Write(p)
	if err != nil {
		w.once.Do(w.end)
	}
	return n, err
}

// check runs Options.Check.
func (r *Remote) check() error {
	if r.opt.Check != nil {
		return r.opt.Check()
	}
	return nil
}

// fail runs Options.Fail.
func (r *Remote) fail(what string, err error) {
	if r.opt.Fail != nil {
		r.opt.Fail(what, err)
	}
}

// dialing is a dial of the shared session in progress; done is closed
// when it ends, with sess or err set.
type dialing struct {
	done chan struct{}
	sess *session
	err  error
}

// shared returns the shared session, dialling it if there is none or it
// died. One caller dials; the others wait for it (or for their ctx) and share its
// session or error.
// r.mu is not held while dialling: it is a leaf (Close may be called
// with a caller's lock held that Dial or Check take).
func (r *Remote) shared(ctx context.Context) (*session, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.sess != nil && !r.sess.isDead() {
		s := r.sess
		r.mu.Unlock()
		return s, nil
	}
	if r.closed || r.opt.Dial == nil {
		r.mu.Unlock()
		return nil, msg.Errorf(syscall.EIO, "%s: connection closed", r.opt.Name)
	}
	if d := r.dialing; d != nil {
		// Another request is dialling: share its outcome, session or
		// error (each waiter dialling again in turn would make the last
		// of n wait n dial timeouts for a guest that does not answer).
		r.mu.Unlock()
		select {
		case <-d.done:
			return d.sess, d.err
		case <-ctx.Done():
			return nil, msg.Errorf(syscall.EINTR, "dial: interrupted")
		}
	}
	d := &dialing{done: make(chan struct{})}
	r.dialing = d
	r.mu.Unlock()
	s, err := r.dial(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(d.done)
	r.dialing = nil
	if err == nil && r.closed {
		s.kill(errClosed)
		s, err = nil, msg.Errorf(syscall.EIO, "%s: connection closed", r.opt.Name)
	}
	d.sess, d.err = s, err
	if err != nil {
		return nil, err
	}
	r.sess = s
	return s, nil
}

// private returns a session for one blocking reader: an idle one, or a
// new one (the shared one when the Remote cannot dial). Reusing them
// keeps connection churn off the server for back-to-back streams.
func (r *Remote) private(ctx context.Context) (*session, error) {
	if r.opt.Dial == nil {
		return r.shared(ctx)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	for len(r.idle) > 0 {
		s := r.idle[len(r.idle)-1]
		r.idle = r.idle[:len(r.idle)-1]
		if !s.isDead() {
			r.mu.Unlock()
			return s, nil
		}
	}
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, msg.Errorf(syscall.EIO, "%s: connection closed", r.opt.Name)
	}
	return r.dial(ctx)
}

// release gives back a private session with nothing in flight.
func (r *Remote) release(s *session) {
	if r.opt.Dial == nil {
		return // the shared session
	}
	ok := r.check() == nil // no lock of ours held while calling out
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.isDead() || len(r.idle) >= maxIdle || r.closed || !ok {
		s.kill(errors.New("not kept"))
		return
	}
	r.idle = append(r.idle, s)
}

// dial opens a new session, bounded by DialTimeout. A failure is
// reported to Fail unless ctx ended or Check refuses now (then its
// error is returned).
func (r *Remote) dial(ctx context.Context) (*session, error) {
	s, err := r.dial1(ctx)
	if err == nil || msg.Errno(err) == syscall.EINTR {
		return s, err
	}
	if cerr := r.check(); cerr != nil {
		return nil, cerr
	}
	r.fail("dial", err)
	return nil, err
}

func (r *Remote) dial1(ctx context.Context) (*session, error) {
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if r.opt.DialTimeout > 0 {
		dctx, cancel = context.WithTimeout(ctx, r.opt.DialTimeout)
	}
	defer cancel()
	c, err := r.opt.Dial(dctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(dctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	s, err := r.attach(c)
	if !stop() && err == nil {
		// dctx ended as the attach answered: its AfterFunc has started
		// and may set the past deadline at any time, failing a later
		// request of the session, so the session is not handed out.
		err = fmt.Errorf("9p attach: answered as the dial ended: %w", dctx.Err())
		s.kill(err)
	}
	if err != nil {
		errno := syscall.EIO
		if ctx.Err() != nil {
			errno = msg.Errno(ctx.Err())
		} else if isTimeout(err) || dctx.Err() != nil || strings.Contains(err.Error(), "i/o timeout") {
			// (p9.ConnError hides the net.Error from errors.As.)
			errno = syscall.ETIMEDOUT
		}
		return nil, msg.Errorf(errno, "%s: server not answering: %v", r.opt.Name, err)
	}
	return s, nil
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
