package vmmproc

import (
	"context"
	"net"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/fs"
	"sandfs/fs/ninep"
	"sandfs/vmm/uds"
)

// Bounds of the daemon's control session (ninep.Options): dialling
// (connect, version, attach) and the requests a healthy VMM answers at
// once (walk, open, clunk). Writes of ctl are bounded by the request's
// context only: save writes guest memory.
const (
	controlDialTimeout = time.Minute
	controlOpTimeout   = 30 * time.Second
)

// session is the daemon's side of a VMM's control tree (control): an
// fs/ninep Remote that dials the control socket at the first request and
// again after its session died (a request cut off by its context, a
// timeout), with ctl, status and err kept open, so that a request is one
// round trip (a Twrite of ctl or a Tread of status) and a refusal a second
// (the Tread of err, Options.Refused).
type session struct {
	remote *ninep.Remote
	ctl    fs.Handle // write-only; nil until the first request
	status fs.Handle
	err    fs.Handle
}

// newSession returns the control session of socket; check refuses
// requests once the process has ended.
func newSession(socket string, check func() error) *session {
	s := &session{}
	s.remote = ninep.NewDialing(ninep.Options{
		Name: "vmm",
		Dial: func(ctx context.Context) (net.Conn, error) {
			return uds.Dial(ctx, socket)
		},
		DialTimeout: controlDialTimeout,
		OpTimeout:   controlOpTimeout,
		Check:       check,
		Refused:     s.refused,
	})
	return s
}

// open opens ctl, status and err once.
func (s *session) open(ctx context.Context) error {
	if s.err != nil {
		return nil
	}
	files := []struct {
		name  string
		flags fs.OpenFlags
		h     *fs.Handle
	}{{"ctl", fs.WriteOnly, &s.ctl}, {"status", fs.ReadOnly, &s.status}, {"err", fs.ReadOnly, &s.err}}
	for _, f := range files {
		h, err := fs.Open(ctx, s.remote.File(f.name), f.flags)
		if err != nil {
			s.closeFiles()
			return err
		}
		*f.h = h
	}
	return nil
}

func (s *session) closeFiles() {
	for _, h := range []*fs.Handle{&s.ctl, &s.status, &s.err} {
		if *h != nil {
			(*h).Close()
			*h = nil
		}
	}
}

// close ends the session for good.
func (s *session) close() { s.remote.Close() }

// write sends one ctl message. A refusal is the VMM's *msg.Error (refused).
func (s *session) write(ctx context.Context, m string) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	_, err := s.ctl.Write(ctx, []byte(m), 0)
	return err
}

// refused implements ninep.Options.Refused: a ctl write refused with
// errno is the VMM's *msg.Error with that errno and the text of err
// (`verb: reason`).
func (s *session) refused(ctx context.Context, op, path string, h fs.Handle, errno syscall.Errno) error {
	if op != "write" || path != "ctl" {
		return errno
	}
	text, err := s.read(ctx, s.err)
	if err != nil || text == "" {
		text = "ctl: " + errno.Error()
	}
	return &msg.Error{Errno: errno, Text: text}
}

// readStatus reads status.
func (s *session) readStatus(ctx context.Context) (string, error) {
	if err := s.open(ctx); err != nil {
		return "", err
	}
	return s.read(ctx, s.status)
}

// read reads the whole text of h (at most 4 KiB), without its newline.
func (s *session) read(ctx context.Context, h fs.Handle) (string, error) {
	buf := make([]byte, msg.Max)
	n, err := h.Read(ctx, buf, 0)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(buf[:n]), "\n"), nil
}
