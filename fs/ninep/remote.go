package ninep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/linux"

	sfs "sandfs/fs"
)

// Remote is a connection to a 9P2000.L server whose tree it presents as
// fs nodes: `sandfs mount` serves Root over FUSE, and a directory table
// binds a remote directory in place with Remote.Bind (the daemon binds
// each guest agent's procs/ and fs/ so, over a Remote from NewDialing).
//
// Nodes hold paths, not fids: each operation walks from the attach root
// and clunks what it walked, so nodes cost nothing while unused and a
// forgotten node leaks no fid. An open handle keeps its own fid.
//
// Sessions: a Remote made with a Dial function (Options.Dial) dials its
// shared session at the first request and again after it died; files
// whose reads block (Options.Private) get a session of their own per
// open, closed when such a read is interrupted (a server that cannot cut
// a read short on flush or clunk ends it with its connection), and kept
// for reuse (at most maxIdle) when closed cleanly. A Remote made over
// one connection (NewRemote) has that one session; Done is closed when
// it ends.
//
// Bounds, so that a hung or dead server never blocks more than the
// requests that touch it: dialling (connect, version, attach) gives up
// after Options.DialTimeout; requests that never block in a healthy
// server (walk, getattr, open, readdir, clunk, create, mkdir, unlink,
// setattr, readlink) after Options.OpTimeout, which also closes the
// session (the next request dials again). Reads and writes are not timed
// (a FIFO may wait) but end when their context does; a session with more
// than maxAbandoned such requests unanswered is closed. Failures of the
// connection itself (dial, timeout, lost, bad reply) are reported to
// Options.Fail with their text.
//
// The server's replies are input (guard.go): reads and writes go through
// ReadP9 and WriteP9 (a count larger than asked, or a panic in the p9
// client, is EIO rather than a crash), listings through ListP9 (bounded),
// and every request runs under Guard in a goroutine of its own.
type Remote struct {
	opt  Options
	done chan struct{} // closed by Close, or when a Remote without Dial loses its session

	// mu protects the fields below. It is a leaf, never held while
	// calling out (Dial, Check, Fail, the server), so Close may be
	// called with any lock of the caller's held.
	mu      sync.Mutex
	sess    *session   // shared session; nil or dead: dial at next use
	dialing *dialing   // the dial of sess in progress; nil: none
	idle    []*session // private sessions free for reuse, at most maxIdle
	closed  bool

	raHeld atomic.Int64 // bytes held in read-ahead windows (readAheadBudget)
}

// Options configure a Remote.
type Options struct {
	// Name names the server in error texts, e.g. `guest: sandbox "t"`.
	Name string
	// Aname is the attach name (a token, or "" for none).
	Aname string
	// Dial opens a new connection to the server. nil: the Remote has
	// only the connection it was made with (NewRemote).
	Dial func(ctx context.Context) (net.Conn, error)
	// Msize is the 9P message size asked for (0: iounit plus headers).
	Msize uint32
	// ReadMax cuts reads to at most this many bytes, so that the p9
	// client never splits one read into several requests (which, on a
	// stream, would wait for more data after a full first part). 0: no cut.
	ReadMax int
	// DialTimeout and OpTimeout bound dialling and the requests that
	// never block (see Remote); 0: no bound.
	DialTimeout, OpTimeout time.Duration
	// Private reports whether reads of the file at path (slash-separated,
	// from the attach root) block, so that each open gets a session of
	// its own. nil: none do.
	Private func(path string) bool
	// Messages reports whether the file at path takes messages that a
	// healthy server answers at once (a ctl file): its writes are
	// bounded by OpTimeout like walks. nil: none is (writes are not
	// timed).
	Messages func(path string) bool
	// Blocking reports whether writes to the file at path may block
	// until a reader takes the data (a process's stdin): its handle is an
	// sfs.BlockingWriter, whose writes a transport lets an interrupt end
	// (other writes, ctl messages above all, run to their end). nil: none
	// is.
	Blocking func(path string) bool
	// Once reports whether an open of the file at path is state that
	// another open cannot give back (a clone file's open is its slot):
	// its handle fails (EIO) once its session died instead of opening
	// the file again. nil: none is.
	Once func(path string) bool
	// Check is called before each request and dial; an error refuses it
	// (for example EBUSY when a sandbox is not running), and is returned
	// instead of a connection failure that happened while it would have.
	Check func() error
	// Fail is told of every failure of the connection itself (dial,
	// timeout, lost, bad reply), what naming the request.
	Fail func(what string, err error)
	// Refused is called when the server refuses (with an errno) a write,
	// an open for writing, a create, mkdir, remove or truncate; what it
	// returns is the caller's error. op is "write", "open", "create",
	// "mkdir", "remove" or "truncate"; h is the handle of a write, nil
	// otherwise. nil: the errno is returned as is.
	Refused func(ctx context.Context, op, path string, h sfs.Handle, err syscall.Errno) error
}

// Dial connects to addr, "unix:PATH" or "tcp:HOST:PORT", and attaches
// with aname token ("" for none).
func Dial(ctx context.Context, addr, token string) (*Remote, error) {
	c, err := DialAddr(ctx, addr)
	if err != nil {
		return nil, err
	}
	r, err := NewRemote(c, token)
	if err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// NewRemote attaches over an established connection c, which it owns.
func NewRemote(c io.ReadWriteCloser, token string) (*Remote, error) {
	r := &Remote{opt: Options{Name: "9p", Aname: token}, done: make(chan struct{})}
	s, err := r.attach(&watchedConn{ReadWriteCloser: c, end: func() { go r.Close() }})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sess = s
	closed := r.closed // the connection ended already
	r.mu.Unlock()
	if closed {
		s.kill(errClosed)
	}
	return r, nil
}

// SetBlocking sets Options.Blocking of a Remote made by Dial or
// NewRemote; call it before the tree is used.
func (r *Remote) SetBlocking(blocking func(path string) bool) { r.opt.Blocking = blocking }

// NewDialing returns a Remote that dials with opt.Dial at its first
// request, and again whenever a session it needs has died.
func NewDialing(opt Options) *Remote {
	if opt.Name == "" {
		opt.Name = "9p"
	}
	return &Remote{opt: opt, done: make(chan struct{})}
}

// Done is closed when the Remote is closed, or, for one made over a
// connection (NewRemote), when that connection ends.
func (r *Remote) Done() <-chan struct{} { return r.done }

// Root returns the remote tree's root directory.
func (r *Remote) Root() sfs.Dir {
	return &remoteDir{remoteNode: newNode(r, nil, 0, BindOptions{Identity: true})}
}

// Bind returns the remote directory at path (slash-separated, from the
// attach root) as a bind point in another tree: it shows attributes a
// without asking the server (so that listing the directory it is bound
// in never waits), and walks to the server at its first Lookup or List.
// o says how the tree under it behaves (BindOptions).
func (r *Remote) Bind(path string, a sfs.Attr, o BindOptions) sfs.Dir {
	names := sfs.SplitPath(path)
	return &remoteDir{remoteNode: newNode(r, names, len(names), o), fixed: &a}
}

// File returns the remote node at path without looking it up: its first
// operation walks there. For callers that know what they open (a clone
// file, a stream), it spares a round trip per path element.
func (r *Remote) File(path string) sfs.Node {
	return &remoteFile{remoteNode: newNode(r, sfs.SplitPath(path), 0, BindOptions{})}
}

// Close closes every session; open handles then fail. It does not block
// on requests or dials in progress.
func (r *Remote) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	ss := append(r.idle, r.sess)
	r.sess, r.idle = nil, nil
	r.mu.Unlock()
	for _, s := range ss {
		if s != nil {
			s.kill(errClosed)
		}
	}
	close(r.done)
	return nil
}

// errClosed is why the sessions of a closed Remote died.
// Hangup ends the Remote's sessions (shared and idle) without closing
// it: the next use dials again. For a server that was replaced under the
// same address (a sandbox's guest restored in a new VMM), whose old
// connections may not have failed yet.
func (r *Remote) Hangup() {
	r.mu.Lock()
	ss := append(r.idle, r.sess)
	r.sess, r.idle = nil, nil
	r.mu.Unlock()
	for _, s := range ss {
		if s != nil {
			s.kill(errHungUp)
		}
	}
}

var (
	errClosed = errors.New("closed")
	errHungUp = errors.New("hung up: the server was replaced")
)

// toErrno turns the p9 client's errors into syscall.Errno, which msg.Errno
// and the FUSE adapter pass through; io.EOF is returned as is.
func toErrno(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	return fmt.Errorf("%w: %v", syscall.EIO, err)
}
