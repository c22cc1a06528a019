package ctlfs

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl"
	"sandfs/fs/ninep"
	"sandfs/vmm/virtio/vsock/hybrid"
)

// A sandbox's procs/ and fs/ are the guest agent's own (package guest),
// imported Plan 9 style: a mount of the agent's 9P server, reached with
// ctl's Sandbox.DialGuest, never a copy. This file holds the connection
// side (guestLink, guestSession); guestnode.go the nodes and handles.
//
// One guestLink per sandbox holds a shared session, dialled at the first
// walk into procs/ or fs/ (or exec) and dialled again when it has died.
// Blocking reads (procs/<n>/stdout, stderr, wait and exec's output) each
// get a private session instead: the agent cannot cut a read short on
// flush or clunk (guest package doc, "Blocking reads"), only by the
// connection ending, so interrupting such a read (FUSE interrupt, 9P
// flush or clunk of the daemon's fid) closes its private connection.
//
// Bounds, so that a hung or dead guest never blocks more than the
// requests that touch it: dialling (vsock + version + attach) gives up
// after GuestDialTimeout; requests that never block in a healthy agent
// (walk, getattr, open, readdir, clunk, status reads) after
// GuestOpTimeout, which also declares the session dead (closed; the next
// request dials again). Data reads and writes are not timed (a stdin
// write or a FIFO read may wait for a long time) but end when their
// context does. Failures of the connection itself (dial, timeout, lost)
// leave their text in the sandbox's err.
//
// A hostile guest: every reply is input (fs/ninep/guard.go). A reply that breaks
// the protocol or a bound, or makes the p9 client panic, fails its
// request with EIO, closes the session (the next request dials again)
// and leaves its text in the sandbox's err; nothing outside this
// sandbox's guest files notices. Each request runs in a goroutine of
// its own (do) under recover. A request given up by its caller (an
// interrupt) keeps its goroutine and buffer until the guest answers; at
// most maxAbandoned per session, then the session is closed, so a guest
// that never answers holds a bounded amount of the daemon.

// Timeouts of guest requests; variables so tests can shorten them.
var (
	GuestDialTimeout = 30 * time.Second // a fresh sandbox boots in seconds, nested under TCG and loaded in tens
	GuestOpTimeout   = 15 * time.Second
)

// guestMsize is the 9P message size asked of the agent (its Dial uses
// 1 MiB too). Reads are cut to guestReadMax so that the p9 client never
// splits one read into several requests, which on a stream would wait
// for more data after a full first part.
const (
	guestMsize   = 1 << 20
	guestReadMax = 512 << 10
)

// guestLinks maps each *ctl.Sandbox that has been touched to its link.
// A link is dropped (and its session closed) when its sandbox ends.
var guestLinks sync.Map // *ctl.Sandbox -> *guestLink

// guestLink is the daemon's side of one sandbox's guest agent.
type guestLink struct {
	sb *ctl.Sandbox

	mu   sync.Mutex      // protects sess, idle; held while dialling sess
	sess *guestSession   // shared session; nil or dead: dial at next use
	idle []*guestSession // private sessions free for reuse, at most maxIdle

	execMu   sync.Mutex // protects lastExec
	lastExec string     // slot of the last command written to exec, "" none
}

// linkOf returns sb's link, making it on first use.
func linkOf(sb *ctl.Sandbox) *guestLink {
	if g, ok := guestLinks.Load(sb); ok {
		return g.(*guestLink)
	}
	g, loaded := guestLinks.LoadOrStore(sb, &guestLink{sb: sb})
	if !loaded {
		go g.(*guestLink).reap()
	}
	return g.(*guestLink)
}

// reap waits for the sandbox to end (or its plane to close), then closes
// the shared session and forgets the link.
func (g *guestLink) reap() {
	for !g.sb.State().Ended() {
		if _, err := g.sb.WaitFrom(context.Background(), g.sb.Version()); err != nil {
			break
		}
	}
	guestLinks.CompareAndDelete(g.sb, g)
	g.mu.Lock()
	if g.sess != nil {
		g.sess.kill(errors.New("sandbox ended"))
		g.sess = nil
	}
	for _, s := range g.idle {
		s.kill(errors.New("sandbox ended"))
	}
	g.idle = nil
	g.mu.Unlock()
}

// maxIdle bounds the private sessions kept for reuse per sandbox.
const maxIdle = 4

// private returns a session for one blocking reader: an idle one, or a
// new one. Reusing them keeps connection churn (a vsock connect and
// close per stream) off the VMM for back-to-back execs.
func (g *guestLink) private(ctx context.Context) (*guestSession, error) {
	if err := g.checkRunning(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	for len(g.idle) > 0 {
		s := g.idle[len(g.idle)-1]
		g.idle = g.idle[:len(g.idle)-1]
		if !s.isDead() {
			g.mu.Unlock()
			return s, nil
		}
	}
	g.mu.Unlock()
	return g.dial(ctx)
}

// release gives back a private session with nothing in flight.
func (g *guestLink) release(s *guestSession) {
	ended := g.sb.State().Ended() // no fs lock held while calling ctl
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.isDead() || len(g.idle) >= maxIdle || ended {
		s.kill(errors.New("not kept"))
		return
	}
	g.idle = append(g.idle, s)
}

// guestSession is one 9P connection to the agent.
type guestSession struct {
	cl   *p9.Client
	root p9.File
	dead chan struct{} // closed by kill

	abandoned atomic.Int32 // requests given up by their caller, still unanswered

	once sync.Once
	why  error // why it died; set once, before dead is closed
}

// kill closes the connection; requests in flight fail.
func (s *guestSession) kill(why error) {
	s.once.Do(func() {
		s.why = why
		close(s.dead)
		s.cl.Close()
	})
}

func (s *guestSession) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// dial opens a new session to the agent, bounded by GuestDialTimeout.
// A failure is recorded in the sandbox's err.
func (g *guestLink) dial(ctx context.Context) (*guestSession, error) {
	s, err := g.dial1(ctx)
	switch en := ctl.Errno(err); {
	case err == nil, en == syscall.EINTR:
	case en == syscall.EBUSY || en == syscall.ENOENT:
		g.failNotRunning(err)
	default:
		g.sb.Fail("guest dial", err)
	}
	return s, err
}

func (g *guestLink) dial1(ctx context.Context) (*guestSession, error) {
	dctx, cancel := context.WithTimeout(ctx, GuestDialTimeout)
	defer cancel()
	c, err := g.dialRetry(dctx)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(GuestDialTimeout))
	stop := context.AfterFunc(dctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	var cl *p9.Client
	var root p9.File
	err = ninep.Guard(func() error {
		var err error
		cl, err = p9.NewClient(c, p9.WithMessageSize(guestMsize))
		if err == nil {
			root, err = cl.Attach("/")
		}
		return err
	})
	stop()
	if err != nil {
		c.Close()
		errno := syscall.EIO
		if ctx.Err() != nil {
			errno = ctl.Errno(ctx.Err())
		} else if isTimeout(err) || dctx.Err() != nil || strings.Contains(err.Error(), "i/o timeout") {
			// (p9.ConnError hides the net.Error from errors.As.)
			errno = syscall.ETIMEDOUT
		}
		return nil, ctl.Errorf(errno, "guest: sandbox %q: agent not answering on port %d: %v", g.sb.ID(), hybrid.AgentPort, err)
	}
	c.SetDeadline(time.Time{})
	return &guestSession{cl: cl, root: root, dead: make(chan struct{})}, nil
}

// dialRetry dials the agent, retrying while the VMM refuses the
// connection (nothing listens on the port yet: the guest is still
// booting, a sandbox fresh from `new`) until ctx ends.
func (g *guestLink) dialRetry(ctx context.Context) (net.Conn, error) {
	wait := 20 * time.Millisecond
	for {
		c, err := g.sb.DialGuest(ctx, hybrid.AgentPort)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// States of one request of do.
const (
	reqRunning int32 = iota
	reqDone
	reqAbandoned
)

// maxAbandoned bounds the requests per session that their callers gave
// up (interrupted) while the guest has not answered them: each holds a
// goroutine and its buffer (up to guestReadMax).
const maxAbandoned = 16

// isBadReply reports whether err is a reply refused as input: ours
// (ninep.ErrBadReply) or the p9 client's (a reply it could not decode, an
// unexpected tag or type, a frame over msize; the last comes inside a
// p9.ConnError, which errors.As cannot see through).
func isBadReply(err error) bool {
	var br *p9.ErrBadResponse
	return errors.Is(err, ninep.ErrBadReply) || errors.Is(err, p9.ErrNoValidMessage) ||
		errors.Is(err, p9.ErrUnexpectedTag) || errors.As(err, &br) ||
		strings.Contains(err.Error(), "message too large")
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// failNotRunning records err, a refusal because the sandbox is not
// running, in its err, except over the reason an ended sandbox died.
func (g *guestLink) failNotRunning(err error) {
	if !g.sb.State().Ended() || g.sb.Err() == "" {
		g.sb.Fail("guest", err)
	}
}

// checkRunning refuses at once (EBUSY) when the sandbox is not running:
// a paused guest would not answer, and a session dialled before the
// pause would only time out.
func (g *guestLink) checkRunning() error {
	if st := g.sb.State(); st != ctl.StateRunning {
		err := ctl.Errorf(syscall.EBUSY, "guest: sandbox %q is %s; need running", g.sb.ID(), st)
		g.failNotRunning(err)
		return err
	}
	return nil
}

// shared returns the shared session, dialling it if there is none or it
// died.
func (g *guestLink) shared(ctx context.Context) (*guestSession, error) {
	if err := g.checkRunning(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sess != nil && !g.sess.isDead() {
		return g.sess, nil
	}
	s, err := g.dial(ctx)
	if err != nil {
		return nil, err
	}
	g.sess = s
	return s, nil
}

// do runs fn, one request on session s, and maps its error. bounded
// requests must answer within GuestOpTimeout or the session is killed
// (ETIMEDOUT). When ctx ends first the request is abandoned (it finishes
// in the background) and do returns EINTR; onCancel, if set, runs then
// (private sessions kill themselves there, which ends the request in the
// agent). A failure of the connection kills s and is recorded in the
// sandbox's err (EIO); the agent's own errors come back as syscall.Errno.
//
// fn runs in a goroutine of its own under ninep.Guard: a panic in it (the p9
// client's, on a bad reply) fails this request like a bad reply.
func (g *guestLink) do(ctx context.Context, s *guestSession, what string, bounded bool, onCancel func(), fn func() error) error {
	done := make(chan error, 1)
	var state atomic.Int32 // reqRunning, then reqDone (fn returned) or reqAbandoned
	go func() {
		err := ninep.Guard(fn)
		if !state.CompareAndSwap(reqRunning, reqDone) {
			s.abandoned.Add(-1)
		}
		done <- err
	}()
	var timeout <-chan time.Time
	if bounded {
		t := time.NewTimer(GuestOpTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case err = <-done:
	case <-timeout:
		err = ctl.Errorf(syscall.ETIMEDOUT, "guest: sandbox %q: no answer to %s in %s; connection closed", g.sb.ID(), what, GuestOpTimeout)
		s.kill(err)
		g.sb.Fail(what, err)
		return err
	case <-ctx.Done():
		if onCancel != nil {
			onCancel()
		}
		if state.CompareAndSwap(reqRunning, reqAbandoned) {
			if n := s.abandoned.Add(1); n > maxAbandoned && !s.isDead() {
				err := ctl.Errorf(syscall.EIO, "guest: sandbox %q: %d requests given up without an answer (last: %s); connection closed", g.sb.ID(), n, what)
				s.kill(err)
				g.sb.Fail(what, err)
			}
		}
		return ctl.Errorf(syscall.EINTR, "%s: interrupted", what)
	case <-s.dead:
		err = s.why
	}
	return g.mapErr(s, what, err)
}

// mapErr turns a p9 client error into a tree error: the agent's errnos
// as syscall.Errno, io.EOF as is, anything else (the connection failed,
// or the reply was refused as input: isBadReply) kills s and becomes an
// EIO *ctl.Error recorded in the sandbox's err. A request that fails
// because s was already closed is not recorded again: the failure that
// closed it was (or the close was on purpose).
func (g *guestLink) mapErr(s *guestSession, what string, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	var ce *ctl.Error
	if errors.As(err, &ce) {
		return err
	}
	if st := g.sb.State(); st != ctl.StateRunning {
		// The sandbox stopped under the request: say so, as a dial would.
		s.kill(err)
		return ctl.Errorf(syscall.EBUSY, "guest: sandbox %q is %s; need running", g.sb.ID(), st)
	}
	if s.isDead() {
		return ctl.Errorf(syscall.EIO, "guest: sandbox %q: %s: connection closed (%v)", g.sb.ID(), what, s.why)
	}
	var e *ctl.Error
	if isBadReply(err) {
		e = ctl.Errorf(syscall.EIO, "guest: sandbox %q: bad reply to %s: %v; connection closed", g.sb.ID(), what, err)
	} else {
		e = ctl.Errorf(syscall.EIO, "guest: sandbox %q: connection lost during %s: %v", g.sb.ID(), what, err)
	}
	s.kill(e)
	g.sb.Fail(what, e)
	return e
}

// guestErrText returns the agent's err text of slot n ("" if none or
// unreadable), used to explain a failed ctl write.
func (g *guestLink) guestErrText(ctx context.Context, s *guestSession, n string) string {
	var text string
	err := g.do(ctx, s, "read procs/"+n+"/err", true, nil, func() error {
		_, f, err := s.root.Walk([]string{"procs", n, "err"})
		if err != nil {
			return err
		}
		defer f.Close()
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			return err
		}
		b := make([]byte, 4096)
		k, err := ninep.ReadP9(f, b, 0)
		if errors.Is(err, ninep.ErrBadReply) {
			return err
		}
		text = guestText(b[:k])
		return nil
	})
	if err != nil {
		return ""
	}
	return text
}

// wrapGuestErr explains a failed request in the guest: errno and a text
// naming where; for ctl writes the agent's own err text. It is recorded
// in the sandbox's err (connection failures already are).
func (g *guestLink) failed(where string, err error, text string) error {
	var ce *ctl.Error
	if errors.As(err, &ce) {
		return err
	}
	en, ok := err.(syscall.Errno)
	if !ok {
		return err
	}
	e := ctl.GuestError(en, where, text)
	g.sb.Fail(where, e)
	return e
}
