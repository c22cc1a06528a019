package ninep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
)

// Remote is a connection to a 9P2000.L server whose tree it presents as
// fs nodes: `sandfs mount` serves Root over FUSE, and a directory table
// can return Root (or a node under it) to bind a remote tree in place.
//
// Nodes hold paths, not fids: each operation walks from the attach root
// and clunks what it walked, so nodes cost nothing while unused and a
// forgotten node leaks no fid. An open handle keeps its own fid.
//
// The server's replies are input, as a guest agent's are to the daemon:
// reads and writes go through ReadP9 and WriteP9 (a count larger
// than asked, or a panic in the p9 client, is EIO rather than a crash of
// the process serving the mount), listings through ListP9 (bounded).
type Remote struct {
	client *p9.Client
	root   p9.File
	done   chan struct{} // closed when the connection ends
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
	done := make(chan struct{})
	cl, err := p9.NewClient(&watchedConn{ReadWriteCloser: c, done: done}, p9.WithMessageSize(iounit+4096))
	if err != nil {
		return nil, fmt.Errorf("9p version: %w", err)
	}
	root, err := cl.Attach(token)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("9p attach: %w", toErrno(err))
	}
	return &Remote{client: cl, root: root, done: done}, nil
}

// Done is closed when the connection to the server ends.
func (r *Remote) Done() <-chan struct{} { return r.done }

// watchedConn closes done at the first read or write error (the
// connection ended).
type watchedConn struct {
	io.ReadWriteCloser
	done chan struct{}
	once sync.Once
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Read(p)
	if err != nil {
		w.once.Do(func() { close(w.done) })
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Write(p)
	if err != nil {
		w.once.Do(func() { close(w.done) })
	}
	return n, err
}

// Root returns the remote tree's root directory.
func (r *Remote) Root() sfs.Dir { return &remoteDir{remoteNode{r: r}} }

// Close closes the connection; open handles then fail.
func (r *Remote) Close() error { return r.client.Close() }

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

// remoteNode is what remote files and directories share: a path.
type remoteNode struct {
	r     *Remote
	names []string // path from the attach root
}

// remoteDir is a remote directory.
type remoteDir struct{ remoteNode }

// remoteFile is a remote file.
type remoteFile struct{ remoteNode }

var (
	_ sfs.Dir    = (*remoteDir)(nil)
	_ sfs.Opener = (*remoteFile)(nil)
)

// walk returns a new fid for the node's path and its attributes.
func (n *remoteNode) walk() (p9.File, sfs.Attr, error) {
	if len(n.names) == 0 {
		_, f, err := n.r.root.Walk(nil)
		if err != nil {
			return nil, sfs.Attr{}, toErrno(err)
		}
		_, _, a, err := f.GetAttr(p9.AttrMaskAll)
		if err != nil {
			f.Close()
			return nil, sfs.Attr{}, toErrno(err)
		}
		return f, FromP9Attr(a), nil
	}
	_, f, _, a, err := n.r.root.WalkGetAttr(n.names)
	if err != nil {
		return nil, sfs.Attr{}, toErrno(err)
	}
	return f, FromP9Attr(a), nil
}

// Stat implements fs.Node.Stat with a fresh getattr.
func (n *remoteNode) Stat(ctx context.Context) (sfs.Attr, error) {
	f, a, err := n.walk()
	if err != nil {
		return sfs.Attr{}, err
	}
	f.Close()
	return a, nil
}

// Lookup implements fs.Dir.Lookup.
func (n *remoteDir) Lookup(ctx context.Context, name string) (sfs.Node, error) {
	c := remoteNode{r: n.r, names: append(append([]string(nil), n.names...), name)}
	f, a, err := c.walk()
	if err != nil {
		return nil, err
	}
	f.Close()
	if a.Mode.IsDir() {
		return &remoteDir{c}, nil
	}
	return &remoteFile{c}, nil
}

// List implements fs.Dir.List.
func (n *remoteDir) List(ctx context.Context) ([]sfs.Dirent, error) {
	f, _, err := n.walk()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return nil, toErrno(err)
	}
	out, err := ListP9(f, 256)
	if err != nil {
		return nil, toErrno(err)
	}
	return out, nil
}

// Open implements fs.Opener.Open.
func (n *remoteFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	h := &remoteHandle{n: &n.remoteNode, flags: flags}
	if err := h.reopen(); err != nil {
		return nil, err
	}
	return h, nil
}

// remoteHandle is one open remote file with its own fid. A read that
// blocks past interruptGrace after its ctx ends is abandoned: the fid is
// clunked (which ends the read on a sandfs server, see conn) and the next
// operation opens the file again.
type remoteHandle struct {
	n     *remoteNode
	flags sfs.OpenFlags

	mu sync.Mutex // protects f
	f  p9.File    // nil after an abandoned read
}

func (h *remoteHandle) reopen() error {
	f, _, err := h.n.walk()
	if err != nil {
		return err
	}
	if _, _, err := f.Open(p9.OpenFlags(h.flags & sfs.OpenFlags(p9.OpenFlagsModeMask))); err != nil {
		f.Close()
		return toErrno(err)
	}
	h.f = f
	return nil
}

func (h *remoteHandle) file() (p9.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		if err := h.reopen(); err != nil {
			return nil, err
		}
	}
	return h.f, nil
}

// Read implements fs.Handle.Read.
func (h *remoteHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	f, err := h.file()
	if err != nil {
		return 0, err
	}
	type result struct {
		n   int
		err error
	}
	// Read into a private buffer: an abandoned read may still complete
	// after p has gone back to its owner.
	buf := make([]byte, len(p))
	ch := make(chan result, 1)
	go func() {
		n, err := ReadP9(f, buf, off) // recovers: this goroutine is ours
		ch <- result{n, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		select {
		case res = <-ch:
		case <-time.After(interruptGrace):
			h.mu.Lock()
			if h.f == f {
				h.f = nil
			}
			h.mu.Unlock()
			f.Close() // a sandfs server then ends the read
			return 0, syscall.EINTR
		}
	}
	copy(p, buf[:res.n])
	if errors.Is(res.err, io.EOF) {
		return res.n, nil
	}
	return res.n, toErrno(res.err)
}

// Write implements fs.Handle.Write.
func (h *remoteHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	f, err := h.file()
	if err != nil {
		return 0, err
	}
	n, err := WriteP9(f, p, off)
	return n, toErrno(err)
}

// Close implements fs.Handle.Close.
func (h *remoteHandle) Close() error {
	h.mu.Lock()
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f != nil {
		return toErrno(f.Close())
	}
	return nil
}
