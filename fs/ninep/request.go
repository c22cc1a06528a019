package ninep

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/msg"
)

// States of one request of do.
const (
	reqRunning int32 = iota
	reqDone
	reqAbandoned
)

// maxAbandoned bounds the requests per session that their callers gave
// up (interrupted) while the server has not answered them: each holds a
// goroutine and its buffer (up to ReadMax).
const maxAbandoned = 16

// do runs fn, one request on session s, and maps its error: call for a
// request without a result.
func (r *Remote) do(ctx context.Context, s *session, what string, bounded bool, onCancel func(), fn func() error) error {
	_, err := call(ctx, r, s, what, bounded, onCancel, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// result is what a request's fn returned, handed over whole.
type result[T any] struct {
	v   T
	err error
}

// call runs fn, one request on session s, and returns its value and its
// mapped error. bounded requests must answer within OpTimeout or the
// session is killed (ETIMEDOUT). When ctx ends first the request is
// abandoned (it finishes in the background) and call returns EINTR;
// onCancel, if set, runs then (it drops the fid, or kills a private
// session, which ends the request in the server). A FUSE request is
// abandoned whenever the kernel interrupts it (a signal to the calling
// thread). A failure of the connection kills s and is reported to Fail
// (EIO); the server's own errors come back as syscall.Errno.
//
// fn runs in a goroutine of its own under Guard: a panic in it (the p9
// client's, on a bad reply) fails this request like a bad reply. Its
// value comes back only when fn itself returned; an abandoned, timed-out
// or orphaned request gives the zero value, so no caller reads what an
// abandoned fn may still be writing. fn must not write its results
// anywhere else.
func call[T any](ctx context.Context, r *Remote, s *session, what string, bounded bool, onCancel func(), fn func() (T, error)) (T, error) {
	done := make(chan result[T], 1)
	var state atomic.Int32 // reqRunning, then reqDone (fn returned) or reqAbandoned
	go func() {
		var res result[T]
		res.err = Guard(func() error {
			var err error
			res.v, err = fn()
			return err
		})
		if !state.CompareAndSwap(reqRunning, reqDone) {
			s.abandoned.Add(-1)
		}
		done <- res
	}()
	var timeout <-chan time.Time
	if bounded && r.opt.OpTimeout > 0 {
		t := time.NewTimer(r.opt.OpTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var zero T
	var res result[T]
	select {
	case res = <-done:
	case <-timeout:
		err := msg.Errorf(syscall.ETIMEDOUT, "%s: no answer to %s in %s; connection closed", r.opt.Name, what, r.opt.OpTimeout)
		s.kill(err)
		r.fail(what, err)
		return zero, err
	case <-ctx.Done():
		if onCancel != nil {
			onCancel()
		}
		if state.CompareAndSwap(reqRunning, reqAbandoned) {
			if n := s.abandoned.Add(1); n > maxAbandoned && !s.isDead() {
				err := msg.Errorf(syscall.EIO, "%s: %d requests given up without an answer (last: %s); connection closed", r.opt.Name, n, what)
				s.kill(err)
				r.fail(what, err)
			}
		}
		return zero, msg.Errorf(syscall.EINTR, "%s: interrupted", what)
	case <-s.dead:
		select {
		case res = <-done: // answered as the session ended
		default:
			res = result[T]{v: zero, err: s.why}
		}
	}
	return res.v, r.mapErr(s, what, res.err)
}

// mapErr turns a p9 client error into a tree error: the server's errnos
// as syscall.Errno, io.EOF (the end of a file, not of the connection) as is, anything else (the connection failed,
// or the reply was refused as input: isBadReply) kills s and becomes an
// EIO *msg.Error reported to Fail (a bad reply on a Remote that cannot
// dial again fails only its request). A request that fails because s was
// already closed is not reported again: the failure that closed it was
// (or the close was on purpose).
func (r *Remote) mapErr(s *session, what string, err error) error {
	var ce p9.ConnError // its Is matches the socket's error: io.EOF when the server went away
	if err == nil || (errors.Is(err, io.EOF) && !errors.As(err, &ce)) {
		return err
	}
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	var me *msg.Error
	if errors.As(err, &me) {
		return err
	}
	if cerr := r.check(); cerr != nil {
		// Refused now (a sandbox that stopped under the request): say so.
		s.kill(err)
		return cerr
	}
	if s.isDead() {
		return msg.Errorf(syscall.EIO, "%s: %s: connection closed (%v)", r.opt.Name, what, s.why)
	}
	var e *msg.Error
	if isBadReply(err) && r.opt.Dial == nil {
		// The one connection cannot be replaced: the lie costs its
		// request only (the framing held, or p9 would have failed it).
		return msg.Errorf(syscall.EIO, "%s: bad reply to %s: %v", r.opt.Name, what, err)
	}
	if isBadReply(err) {
		e = msg.Errorf(syscall.EIO, "%s: bad reply to %s: %v; connection closed", r.opt.Name, what, err)
	} else {
		e = msg.Errorf(syscall.EIO, "%s: connection lost during %s: %v", r.opt.Name, what, err)
	}
	s.kill(e)
	r.fail(what, e)
	return e
}

// isBadReply reports whether err is a reply refused as input: ours
// (ErrBadReply) or the p9 client's (a reply it could not decode, an
// unexpected tag or type, a frame over msize; the last comes inside a
// p9.ConnError, which errors.As cannot see through).
func isBadReply(err error) bool {
	var br *p9.ErrBadResponse
	return errors.Is(err, ErrBadReply) || errors.Is(err, p9.ErrNoValidMessage) ||
		errors.Is(err, p9.ErrUnexpectedTag) || errors.As(err, &br) ||
		strings.Contains(err.Error(), "message too large")
}
