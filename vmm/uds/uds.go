// Package uds binds and dials unix stream sockets by path, whatever the
// path's length.
//
// A sockaddr_un holds at most 107 bytes of path. A sandbox's sockets
// live in its directory under the daemon's state directory, which with
// a long state directory and a 63-byte sandbox name is longer than
// that. A longer path is reached through a descriptor of its directory,
// "/proc/self/fd/<n>/<name>", which the kernel resolves to the same
// directory: only "/proc/self/fd/<n>/" and the last element must fit.
// A process without /proc (the jailed VMM) names its sockets relative
// to its working directory instead (vmm/vmmproc).
package uds

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest path a sockaddr_un holds (its 108 bytes, less
// the terminating NUL).
const MaxPath = 107

// Listener is a unix stream listener that removes its socket file when
// closed.
type Listener struct {
	*net.UnixListener
	path string
}

// Close implements net.Listener: it removes the socket file, then closes.
func (l *Listener) Close() error {
	os.Remove(l.path)
	return l.UnixListener.Close()
}

// Listen binds a unix stream socket at path, replacing a stale socket
// file there.
func Listen(path string) (*Listener, error) {
	os.Remove(path)
	var ln *net.UnixListener
	err := reach(path, func(p string) error {
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, err
	}
	// The name bound may be a /proc/self/fd path that means nothing
	// once its descriptor is closed: Close removes path itself.
	ln.SetUnlinkOnClose(false)
	return &Listener{UnixListener: ln, path: path}, nil
}

// Dial connects to the unix stream socket at path.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	var c net.Conn
	err := reach(path, func(p string) error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "unix", p)
		return err
	})
	return c, err
}

// reach calls f with a name of path that fits a sockaddr_un: path
// itself, or its base name under a descriptor of its directory, open
// while f runs.
func reach(path string, f func(name string) error) error {
	if len(path) <= MaxPath {
		return f(path)
	}
	dir, base := filepath.Split(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	name := fmt.Sprintf("/proc/self/fd/%d/%s", fd, base)
	if len(name) > MaxPath {
		return &os.PathError{Op: "socket", Path: path, Err: syscall.ENAMETOOLONG}
	}
	return f(name)
}
