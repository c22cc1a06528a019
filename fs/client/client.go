// Package client is the host side of sandfs's command line: a 9P client
// of the daemon's tree (the unix socket, or TCP with a token) and the
// few file conversations the commands need (new, ls, exec, kill, cp).
// Every operation is plain file I/O on the tree, so whatever the CLI does
// a shell script can do with echo and cat on a mount; it works without
// any FUSE mount.
//
// Errors: a failed write returns an *Error with the errno and the text
// of the nearest err file (/err, /sandboxes/<id>/err), because 9P
// carries only the errno.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"

	sfs "sandfs/fs"
	"sandfs/fs/ninep"
)

// DefaultAddr is the daemon's default 9P socket.
const DefaultAddr = "unix:/run/sandfs/sandfs.sock"

// msize is the 9P message size asked for; reads are cut to readMax so
// that the p9 client never splits one read of a stream into several
// requests.
const (
	msize   = 256 << 10
	readMax = 64 << 10
)

// Client is one 9P connection to a sandfs daemon.
type Client struct {
	cl   *p9.Client
	root p9.File
}

// Dial connects to addr ("unix:PATH" or "tcp:HOST:PORT") and attaches
// with token as the attach name ("" on the unix socket).
func Dial(ctx context.Context, addr, token string) (*Client, error) {
	c, err := ninep.DialAddr(ctx, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	cl, err := ninep.NewClient(c, msize)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("dial %s: 9p version: %w", addr, err)
	}
	root, err := cl.Attach(token)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("dial %s: 9p attach: %w", addr, errnoErr(err))
	}
	c.SetDeadline(time.Time{})
	return &Client{cl: cl, root: root}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cl.Close() }

// Error is a failed request: the errno the tree returned and, when an
// err file had one, its text.
type Error struct {
	Op    string // e.g. "write sandboxes/t/ctl"
	Errno syscall.Errno
	Text  string // from the err file, "" if none
}

func (e *Error) Error() string {
	if e.Text != "" {
		return fmt.Sprintf("%s (%v)", e.Text, e.Errno)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Errno)
}

// Unwrap returns the errno, for errors.Is(err, syscall.ENOENT).
func (e *Error) Unwrap() error { return e.Errno }

// errnoErr turns a p9 client error into a syscall.Errno where it is one.
func errnoErr(err error) error {
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	return err
}

// File is one open file of the tree, with a file offset.
type File struct {
	c    *Client
	path string
	f    p9.File
	off  int64
}

// Open opens path with flags (os.O_RDONLY, O_WRONLY, O_RDWR; O_TRUNC
// truncates first).
func (c *Client) Open(path string, flags int) (*File, error) {
	return c.openAt(c.root, path, sfs.SplitPath(path), flags)
}

// openAt opens names under directory fid dir (path names it in errors):
// a walk from a directory already walked costs the server a lookup per
// element less than one from the root.
func (c *Client) openAt(dir p9.File, path string, names []string, flags int) (*File, error) {
	_, f, err := dir.Walk(names)
	if err != nil {
		return nil, &Error{Op: "open " + path, Errno: errno(err)}
	}
	if flags&syscall.O_TRUNC != 0 {
		if err := f.SetAttr(p9.SetAttrMask{Size: true}, p9.SetAttr{}); err != nil {
			f.Close()
			return nil, &Error{Op: "truncate " + path, Errno: errno(err)}
		}
	}
	if _, _, err := f.Open(p9.OpenFlags(flags & syscall.O_ACCMODE)); err != nil {
		f.Close()
		return nil, &Error{Op: "open " + path, Errno: errno(err)}
	}
	return &File{c: c, path: path, f: f}, nil
}

// Create makes and opens a new file (EEXIST if it exists) in a
// directory that allows it (a sandbox's fs/).
func (c *Client) Create(path string, perm uint32) (*File, error) {
	names := sfs.SplitPath(path)
	if len(names) == 0 {
		return nil, &Error{Op: "create " + path, Errno: syscall.EINVAL}
	}
	_, d, err := c.root.Walk(names[:len(names)-1])
	if err != nil {
		return nil, &Error{Op: "create " + path, Errno: errno(err)}
	}
	f, _, _, err := d.Create(names[len(names)-1], p9.WriteOnly, p9.FileMode(perm&0o7777), 0, 0)
	if err != nil {
		d.Close()
		return nil, &Error{Op: "create " + path, Errno: errno(err)}
	}
	return &File{c: c, path: path, f: f}, nil
}

func errno(err error) syscall.Errno {
	var le linux.Errno
	if errors.As(err, &le) {
		return syscall.Errno(le)
	}
	return syscall.EIO
}

// Read implements io.Reader: a zero-byte read is EOF.
func (f *File) Read(p []byte) (int, error) {
	if len(p) > readMax {
		p = p[:readMax]
	}
	n, err := ninep.ReadP9(f.f, p, f.off)
	f.off += int64(n)
	if errors.Is(err, io.EOF) || (err == nil && n == 0 && len(p) > 0) {
		return n, io.EOF
	}
	if err != nil {
		return n, &Error{Op: "read " + f.path, Errno: errno(err)}
	}
	return n, nil
}

// Write implements io.Writer; one call may be several 9P writes.
func (f *File) Write(p []byte) (int, error) {
	n, err := ninep.WriteP9(f.f, p, f.off)
	f.off += int64(n)
	if err != nil {
		return n, &Error{Op: "write " + f.path, Errno: errno(err)}
	}
	return n, nil
}

// Msg writes one message (one 9P write at offset 0, as `echo msg > file`
// does); a failure gets the text of errPath ("" for none).
func (f *File) Msg(msg, errPath string) error {
	if _, err := ninep.WriteP9(f.f, []byte(msg), 0); err != nil {
		return f.c.explain("write "+f.path, errno(err), errPath)
	}
	return nil
}

// Close clunks the file.
func (f *File) Close() error { return f.f.Close() }

// explain makes the *Error for a failed request, with the text of the
// err file at errPath.
func (c *Client) explain(op string, en syscall.Errno, errPath string) error {
	e := &Error{Op: op, Errno: en}
	if errPath != "" {
		if b, err := c.ReadFileMax(errPath, MaxErrText); err == nil {
			e.Text = strings.TrimSpace(string(b))
		}
	}
	return e
}

// ReadFile reads a whole file of at most MaxFile bytes (ReadFileMax):
// the tree's files that are read whole (status, info) are short, and
// a server that sent without end must not take the client's memory.
// Copy larger files with CopyFrom.
func (c *Client) ReadFile(path string) ([]byte, error) {
	return c.ReadFileMax(path, MaxFile)
}

// Bounds of what the client reads whole from a server (the daemon, or
// whoever answers on its address).
const (
	MaxErrText = 64 << 10 // an err file, for an error's text
	MaxReply   = 64 << 10 // a ctl message's reply, a wait file
	MaxFile    = 16 << 20 // ReadFile
)

// ReadFileMax reads a whole file of at most max bytes; a longer one is
// E2BIG ("read PATH: over MAX bytes"), after reading max+1 bytes of it.
// For files whose writer is not trusted (a guest's), which could
// otherwise be endless.
func (c *Client) ReadFileMax(path string, max int) ([]byte, error) {
	f, err := c.Open(path, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadAllMax(max)
}

// ReadAllMax reads the rest of f, at most max bytes; more is E2BIG
// ("read PATH: over MAX bytes"), after reading max+1 bytes.
func (f *File) ReadAllMax(max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err == nil && len(b) > max {
		return nil, &Error{Op: "read " + f.path, Errno: syscall.E2BIG, Text: fmt.Sprintf("read %s: over %d bytes", f.path, max)}
	}
	return b, err
}

// WriteMsg opens path for writing, writes msg as one message and closes
// it; a failure gets the text of errPath.
func (c *Client) WriteMsg(path, msg, errPath string) error {
	f, err := c.Open(path, syscall.O_WRONLY)
	if err != nil {
		return c.explain("open "+path, err.(*Error).Errno, errPath)
	}
	defer f.Close()
	return f.Msg(msg, errPath)
}

// Dirent is one entry of ReadDir.
type Dirent struct {
	Name string
	Dir  bool
}

// ReadDir lists a directory.
func (c *Client) ReadDir(path string) ([]Dirent, error) {
	_, f, err := c.root.Walk(sfs.SplitPath(path))
	if err != nil {
		return nil, &Error{Op: "readdir " + path, Errno: errno(err)}
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return nil, &Error{Op: "readdir " + path, Errno: errno(err)}
	}
	// Bounded and checked (ninep.ListP9): entries, names, offsets.
	ds, err := ninep.ListP9(f, 1<<16)
	if err != nil {
		return nil, &Error{Op: "readdir " + path, Errno: errno(err)}
	}
	out := make([]Dirent, 0, len(ds))
	for _, d := range ds {
		out = append(out, Dirent{Name: d.Name, Dir: d.Mode.IsDir()})
	}
	return out, nil
}

// Stat says whether path exists and is a directory.
func (c *Client) Stat(path string) (dir bool, size int64, err error) {
	_, f, _, a, err := c.root.WalkGetAttr(sfs.SplitPath(path))
	if err != nil {
		return false, 0, &Error{Op: "stat " + path, Errno: errno(err)}
	}
	f.Close()
	return a.Mode.IsDir(), int64(a.Size), nil
}
