package e2b

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// The adapter's connections to the tree. Unary calls share one per API
// key; streaming calls dial their own. A connection breaks when the
// daemon's 9P service ends under it (a restart): every request on it then
// fails with EIO, and the first one to see that finds it dead (a getattr
// of the root fails too), drops it and answers 503; the next request
// dials again, each key's failed dials spaced by a doubling backoff
// (during which requests answer 503 at once instead of waiting).

// errTreeDown is the tree out of reach: 503, and Connect's unavailable.
var errTreeDown = errors.New("the sandfs tree is unreachable (daemon restarting?); retry")

// The backoff between failed dials of one key.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// backoff is a key's failed dials: no dial before next.
type backoff struct {
	fails int
	next  time.Time
}

// tree returns the shared tree connection of key, dialling it first.
func (s *Server) tree(ctx context.Context, key string) (*client.Client, error) {
	s.mu.Lock()
	c := s.clients[key]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := s.dial(ctx, key)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if had := s.clients[key]; had != nil { // a concurrent request dialled too
		c.Close()
		return had, nil
	}
	s.clients[key] = c
	return c, nil
}

// streamTree dials a connection of its own for one streaming call: its
// blocked reads end when it is closed.
func (s *Server) streamTree(ctx context.Context, key string) (*client.Client, error) {
	return s.dial(ctx, key)
}

// dial dials the tree as key, unless its last dials failed and the
// backoff has not passed.
func (s *Server) dial(ctx context.Context, key string) (*client.Client, error) {
	s.mu.Lock()
	if b := s.down[key]; b != nil && s.now().Before(b.next) {
		wait := b.next.Sub(s.now()).Round(time.Millisecond)
		s.mu.Unlock()
		return nil, fmt.Errorf("%w (next dial in %v)", errTreeDown, wait)
	}
	s.mu.Unlock()
	c, err := s.cfg.Dial(ctx, s.cfg.Keys[key])
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.down, key)
		return c, nil
	}
	b := s.down[key]
	if b == nil {
		b = &backoff{}
		s.down[key] = b
	}
	b.next = s.now().Add(min(minBackoff<<min(b.fails, 16), maxBackoff))
	b.fails++
	s.log.Warn("e2b: tree dial failed", "fails", b.fails, "err", err)
	return nil, fmt.Errorf("%w: %v", errTreeDown, err)
}

// connLost turns err into errTreeDown when it is what a broken
// connection gives (EIO, or no errno at all) and a shared connection is
// found dead, dropping the dead ones; any other err is returned as is.
func (s *Server) connLost(err error) error {
	var en syscall.Errno
	if err == nil || errors.Is(err, errTreeDown) || (errors.As(err, &en) && en != syscall.EIO) {
		return err
	}
	if s.dropDead() == 0 {
		return err
	}
	return fmt.Errorf("%w: %v", errTreeDown, err)
}

// dropDead closes and forgets every shared connection whose root no
// longer answers a getattr, and returns how many it dropped.
func (s *Server) dropDead() int {
	s.mu.Lock()
	all := make(map[string]*client.Client, len(s.clients))
	for k, c := range s.clients {
		all[k] = c
	}
	s.mu.Unlock()
	n := 0
	for k, c := range all {
		if _, err := c.StatAttr(""); err == nil {
			continue
		}
		n++
		s.mu.Lock()
		if s.clients[k] == c {
			delete(s.clients, k)
		}
		s.mu.Unlock()
		c.Close()
	}
	return n
}

// lostInterceptor gives the envd Connect calls connLost: an error that
// a broken connection caused ends the call as unavailable.
type lostInterceptor struct{ s *Server }

func (li lostInterceptor) lost(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() != connect.CodeInternal {
		return err
	}
	if lerr := li.s.connLost(err); errors.Is(lerr, errTreeDown) {
		return connect.NewError(connect.CodeUnavailable, lerr)
	}
	return err
}

// WrapUnary implements connect.Interceptor.
func (li lostInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, li.lost(err)
	}
}

// WrapStreamingClient implements connect.Interceptor (no clients here).
func (lostInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (li lostInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return li.lost(next(ctx, conn))
	}
}
