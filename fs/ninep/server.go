package ninep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/hugelgupf/p9/fsimpl/qids"
	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

// Server serves one tree over 9P2000.L on any number of listeners.
type Server struct {
	root sfs.Dir
	log  *slog.Logger

	paths    qids.PathGenerator
	mu       sync.Mutex        // protects qidPaths
	qidPaths map[string]uint64 // tree path -> QID path
}

// NewServer returns a server for root. log may be nil (discard).
func NewServer(root sfs.Dir, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{root: root, log: log, qidPaths: map[string]uint64{}}
}

// qidPath returns the QID path of tree path p, the same for the life of
// the server.
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
func (s *Server) Serve(ctx context.Context, l net.Listener, token string) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServeConn(ctx, c, token)
		}()
	}
}

// ServeConn serves one connection until it ends or ctx is done.
func (s *Server) ServeConn(ctx context.Context, c net.Conn, token string) {
	cn := newConn(ctx, s, c, token)
	defer cn.cancel()
	defer func() {
		// See eofDelay: p9's teardown race must not take the daemon down.
		if r := recover(); r != nil {
			s.log.Error("9p: connection teardown panicked", "remote", cn.remote, "panic", fmt.Sprint(r))
			c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	s.log.Debug("9p: connection", "remote", c.RemoteAddr().String())
	srv := p9.NewServer(cn)
	srv.Handle(&frameReader{r: c, c: cn}, c)
}
