package hybrid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/vmm/uds"
)

// vsockHandshakeTimeout bounds the handshake when ctx has no deadline: a
// hung VMM or a guest that does not listen must not hang a dial.
const vsockHandshakeTimeout = 5 * time.Second

// Dial connects to guest port on the hybrid vsock unix socket at path
// (of any length: package uds), then runs the handshake (vsockConnect).
// A refusal is ECONNREFUSED; a deadline that passes is ETIMEDOUT; a
// cancelled ctx gives ctx.Err().
func Dial(ctx context.Context, path string, port uint32) (net.Conn, error) {
	c, err := uds.Dial(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := handshake(ctx, c, port); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// handshake runs vsockConnect on c, bounded by ctx, and leaves c without
// a deadline. An end of ctx that comes as the reply does fails it too:
// ctx's AfterFunc, which cuts the wait short with a deadline in the past,
// has then started and may set that deadline at any time, even after
// the session's first requests (the next read or write would fail with
// "i/o timeout"), so c cannot be handed out.
func handshake(ctx context.Context, c net.Conn, port uint32) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(vsockHandshakeTimeout)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	err := vsockConnect(c, port)
	stopped := stop()
	if err == nil && !stopped {
		err = fmt.Errorf("vsock connect %d: answered as the context ended", port)
	}
	switch {
	case err == nil:
	case !stopped && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	case isTimeout(err) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The conn's deadline and the context's may pass in either
		// order: both are the deadline passing.
		err = fmt.Errorf("%w: %v", syscall.ETIMEDOUT, err)
	}
	if err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	return nil
}

// vsockConnect sends "CONNECT port\n" on conn and reads the reply line,
// which must be "OK <n>\n". It reads byte by byte so that nothing after
// the newline (the guest's first bytes) is consumed. conn's deadline, if
// any, bounds it; a refusal (the VMM closes the socket, or answers
// something else, when nothing listens on port) is ECONNREFUSED.
func vsockConnect(conn net.Conn, port uint32) error {
	if _, err := fmt.Fprintf(conn, "CONNECT %d\n", port); err != nil {
		return fmt.Errorf("vsock connect %d: %w", port, err)
	}
	var line []byte
	var b [1]byte
	for len(line) < 64 {
		n, err := conn.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			continue
		}
		if err != nil {
			if len(line) == 0 && !isTimeout(err) {
				return fmt.Errorf("vsock connect %d: refused (connection closed): %w", port, syscall.ECONNREFUSED)
			}
			return fmt.Errorf("vsock connect %d: %w", port, err)
		}
	}
	reply := string(line)
	if f := strings.Fields(reply); len(f) == 2 && f[0] == "OK" {
		if _, err := strconv.ParseUint(f[1], 10, 32); err == nil {
			return nil
		}
	}
	return fmt.Errorf("vsock connect %d: refused: %q: %w", port, reply, syscall.ECONNREFUSED)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
