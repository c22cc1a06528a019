package ninep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/fsimpl/qids"
	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/cred"
	sfs "sandfs/fs"
)

// Server serves one tree over 9P2000.L on any number of listeners.
type Server struct {
	root sfs.Dir
	log  *slog.Logger
	lim  limits // for clients that have not attached; set before serving
	// ioUnit is the iounit of every open (Ropen, Rlcreate); set before
	// serving (SetIOUnit).
	ioUnit uint32
	// ids shows owners to clients (SetIDMap); nil: as they are. Set
	// before serving.
	ids *IDMap
	// passReads: large reads may be passed to clients that ask
	// (SetPassReads, passread.go). Set before serving.
	passReads bool
	// passFiles: opens may pass their descriptors to clients that ask
	// (passfile.go); set before serving.
	passFiles bool
	// orderClunks: clunks are finished before the next request is read,
	// for clients that ask (SetOrderClunks, clunkorder.go). Set before
	// serving.
	orderClunks bool

	paths    qids.PathGenerator
	mu       sync.Mutex        // protects qidPaths
	qidPaths map[string]uint64 // tree path -> QID path

	budgetMu sync.Mutex             // protects budgets
	budgets  map[uint32]*userBudget // uid -> its connections' budget (fidlimit.go)
}

// NewServer returns a server for root. log may be nil (discard).
func NewServer(root sfs.Dir, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{root: root, log: log, lim: defaultLimits, ioUnit: iounit, qidPaths: map[string]uint64{}, budgets: map[uint32]*userBudget{}}
}

// SetIOUnit sets the iounit the server gives clients at each open (the
// largest read or write they should send; 0: as large as the msize
// allows, the Linux client's reading of 0), before it serves. The
// default, 64 KiB, suits the control tree's short files; a tree of
// real files (a world's union) is read faster in fewer, larger reads.
func (s *Server) SetIOUnit(n uint32) { s.ioUnit = n }

// DefaultOpenBound is how many fids a connection may hold open unless
// SetOpenBound says otherwise; MaxOpenBound the most it may be allowed
// (the bound on all its fids).
const (
	DefaultOpenBound = defaultOpens
	MaxOpenBound     = defaultFids
)

// SetOpenBound sets how many fids each attached connection may hold
// open at a time (fidlimit.go; default DefaultOpenBound), before it serves. A
// bound outside 1..MaxOpenBound is an error and changes nothing.
func (s *Server) SetOpenBound(n int) error {
	if n < 1 || n > MaxOpenBound {
		return fmt.Errorf("9p: open fids bound %d: want 1-%d", n, MaxOpenBound)
	}
	s.lim.opens = n
	return nil
}

// qidPath returns the QID path the server makes for tree path p, the
// same for the life of the server.
func (s *Server) qidPath(p string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.qidPaths[p]
	if !ok {
		q = s.paths.NewPath()
		s.qidPaths[p] = q
	}
	return q
}

// Serve accepts connections on l and serves each until ctx is done, then
// closes l, ends every connection and returns once all are finished.
// A non-empty token is required as the attach name (see package doc).
// Connections that have not attached yet are limited per listener (see
// limits); one over the limit is closed at once.
func (s *Server) Serve(ctx context.Context, l net.Listener, token string) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	adm := newAdmission(&s.lim)
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !transientAccept(err) {
				return err
			}
			// Out of descriptors or memory for a moment (a flood):
			// wait and go on, as net/http does, rather than end the
			// listener and with it the daemon.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("9p: accept", "err", err, "retry", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		release, ok, refused := adm.acquire(c.RemoteAddr())
		if !ok {
			if refused > 0 {
				s.log.Warn("9p: refusing connections: too many not yet attached", "remote", c.RemoteAddr().String(), "refused", refused)
			}
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, c, token, release)
		}()
	}
}

// transientAccept reports whether an Accept error passes with time.
func transientAccept(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ServeConn serves one connection until it ends or ctx is done.
func (s *Server) ServeConn(ctx context.Context, c net.Conn, token string) {
	s.serveConn(ctx, c, token, nil)
}

// ServeConnAs serves one connection whose client the caller vouches for
// as who, without a token and without asking the socket (a guest agent
// serving its host over vsock: root).
func (s *Server) ServeConnAs(ctx context.Context, c net.Conn, who cred.Cred) {
	s.serveConnAs(ctx, c, "", who, nil, false)
}

func (s *Server) serveConn(ctx context.Context, c net.Conn, token string, release func()) {
	who, err := identity(c, token)
	if err != nil {
		s.log.Warn("9p: connection refused", "remote", c.RemoteAddr().String(), "reason", err.Error())
		c.Close()
		if release != nil {
			release()
		}
		return
	}
	s.serveConnAs(ctx, c, token, who, release, true)
}

// serveConnAs serves c as who; shared: c counts against who's budget
// (fidlimit.go).
func (s *Server) serveConnAs(ctx context.Context, c net.Conn, token string, who cred.Cred, release func(), shared bool) {
	cn := newConn(ctx, s, c, token, who, release)
	if shared {
		s.joinBudget(cn, who)
		defer s.leaveBudget(cn)
	}
	defer cn.release()
	defer cn.cancel()
	defer cn.closePasses()
	defer cn.closeOffers()
	defer func() {
		// See eofDelay: p9's teardown race must not take the daemon down.
		if r := recover(); r != nil {
			s.log.Error("9p: connection teardown panicked", "remote", cn.remote, "panic", fmt.Sprint(r))
			c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	attachBy := time.AfterFunc(s.lim.authTimeout, func() {
		if !cn.authed.Load() {
			s.log.Warn("9p: connection closed", "remote", cn.remote, "attached", false, "reason", fmt.Sprintf("no attach within %v", s.lim.authTimeout))
			c.Close()
		}
	})
	defer attachBy.Stop()
	s.log.Debug("9p: connection", "remote", cn.remote)
	srv := p9.NewServer(cn)
	srv.Handle(newFrameReader(c, cn), &replyWriter{w: c, c: cn})
}
