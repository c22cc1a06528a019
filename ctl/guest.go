package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"sandfs/ctl/msg"
)

// GuestDialer is optionally implemented by a Machine whose guest can be
// reached over vsock: DialGuest returns a stream connected to the given
// guest port. The VMM's machine implements it with the hybrid-vsock
// handshake (hybrid.Dial: connect to the VMM's vsock unix socket, send
// "CONNECT <port>\n", read "OK <n>\n"). DialGuest must give up when ctx
// ends; it is called with no ctl lock held.
type GuestDialer interface {
	DialGuest(ctx context.Context, port uint32) (net.Conn, error)
}

// ConsolePather is optionally implemented by a Machine that logs its
// serial console to a file; ConsolePath returns that file's path. It is
// called with a lock held and must return at once.
type ConsolePather interface {
	ConsolePath() string
}

// DialGuest connects to port of the sandbox's guest. The sandbox must be
// running (EBUSY otherwise, with the state it needs; ENOENT once removed);
// a machine that cannot reach its guest gives ENOTSUP. Other failures
// keep the dialer's errno (ETIMEDOUT when ctx's deadline passes, EINTR
// when it is cancelled, EIO otherwise) and say which sandbox and port.
// DialGuest records nothing in err: callers that serve a request call
// Fail with the error.
func (s *Sandbox) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	s.mu.Lock()
	st, m := s.state, s.m
	s.mu.Unlock()
	if st != StateRunning {
		if st == StateRemoved {
			return nil, Errorf(syscall.ENOENT, "guest: no sandbox %s (removed)", msg.Cite(s.id))
		}
		return nil, Errorf(syscall.EBUSY, "guest: sandbox %s is %s; need running", msg.Cite(s.id), st)
	}
	d, ok := m.(GuestDialer)
	if !ok {
		return nil, Errorf(syscall.ENOTSUP, "guest: the machine of sandbox %s cannot reach its guest", msg.Cite(s.id))
	}
	c, err := d.DialGuest(ctx, port)
	if err != nil {
		errno := Errno(err)
		if errno == syscall.EIO && ctx.Err() != nil {
			errno = Errno(ctx.Err())
		}
		return nil, Errorf(errno, "guest: dial %s port %d: %s", msg.Cite(s.id), port, errText(err))
	}
	return c, nil
}

// GuestLink returns the sandbox's link to its guest: whatever the file
// tree keeps to reach the agent (package fs/ctlfs: its 9P sessions and
// exec's last command), made by mk at the first call and kept. ctl
// closes it and forgets it when the sandbox ends (dead or removed),
// before the end is reported (to Wait and wait files), so a link lives no
// longer than the machine it reaches; a call after that gets a new one
// (closed at once if the sandbox has ended). mk is called with no ctl
// lock held; the link's Close is called with the sandbox's lock held
// and must return promptly without calling into ctl.
func (s *Sandbox) GuestLink(mk func() io.Closer) io.Closer {
	s.mu.Lock()
	l := s.link
	s.mu.Unlock()
	if l != nil {
		return l
	}
	n := mk()
	s.mu.Lock()
	switch {
	case s.link != nil:
		l = s.link // made meanwhile by another caller
	case s.state.Ended():
		l = nil
	default:
		s.link, l = n, n
	}
	s.mu.Unlock()
	switch {
	case l == nil:
		n.Close() // not kept: the sandbox has ended
		return n
	case l != n:
		n.Close()
	}
	return l
}

// ConsolePath returns the file holding the sandbox's serial console log,
// or "" if its machine keeps none. The path stays known after the
// machine ends (the log is in the sandbox's runtime directory, which
// lives until rm).
func (s *Sandbox) ConsolePath() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == StateRemoved {
		return ""
	}
	return s.console
}

// Fail records a failed request that reached this sandbox through the
// file tree rather than its ctl (a write in procs/ or fs/, an exec, a
// lost guest connection): err's text becomes the sandbox's Err and is
// logged, as for a failed ctl write. what names the request in the log
// (a path, a message).
func (s *Sandbox) Fail(what string, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.err = errText(err)
	s.mu.Unlock()
	s.p.fail(s.id, []byte(what), err)
	if errors.Is(err, syscall.ETIMEDOUT) {
		s.stallDump()
	}
}

// dumper is a Machine that can write its state dump (the VMM's virtio
// queues and vCPUs, vmmproc.Process.AskDump) and return what its log
// and console said last.
type dumper interface {
	AskDump()
	LastWords() []any
}

// stallDump logs, once per machine, the state dump of s's machine after
// its guest stopped answering (a request timed out): where its vCPUs
// stood is the only record of a guest that stalled, and harnesses tell
// the lab's nested-emulation stalls by it (docs/lab.md, tools/lab's
// labsvmrips), where the guest's own console says nothing.
func (s *Sandbox) stallDump() {
	s.mu.Lock()
	m := s.m
	if m == nil || s.dumped == m {
		s.mu.Unlock()
		return
	}
	s.dumped = m
	s.mu.Unlock()
	d, ok := m.(dumper)
	if !ok {
		return
	}
	go func() {
		d.AskDump() // (it waits for the dump to be written)
		s.p.log.Warn("sandbox's guest stopped answering: its machine's state", append([]any{"sandbox", s.id}, d.LastWords()...)...)
	}()
}

// GuestError is the error for a request that failed in the guest: errno
// from the guest, text (the guest's own err text when it gave one)
// prefixed with where it happened, e.g.
//
//	procs/3/ctl: cwd: no such directory "/nope"
func GuestError(errno syscall.Errno, where, text string) *Error {
	if text == "" {
		text = errno.Error()
	}
	return &Error{Errno: errno, Text: fmt.Sprintf("%s: %s", where, text)}
}
