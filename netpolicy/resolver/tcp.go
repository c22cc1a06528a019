package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"
)

// DNS over TCP (RFC 1035 §4.2.2, RFC 7766): each message is preceded by
// its length, two bytes in network order; a connection may carry several
// queries, answered in order.
//
//	+--------+--------+------------------+
//	| length (be16)   | message (length) |
//	+--------+--------+------------------+
const (
	maxConns      = 16               // TCP connections open at once per sandbox
	maxConnQuerys = 64               // queries per connection, then it is closed
	idleTCP       = 10 * time.Second // a connection with no query for this long is closed
	maxAnswerTCP  = 65535            // what the length prefix can say
)

// ServeTCP answers queries over TCP on ln until ln is closed: the
// guest's retry of a query whose UDP answer came back truncated. The
// same rules as Serve; a query is forwarded to the upstream over TCP
// too, so the whole answer comes back.
func (r *Resolver) ServeTCP(ln net.Listener) error {
	sem := make(chan struct{}, maxConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close() // too many at once
			continue
		}
		go func() {
			defer func() { <-sem }()
			defer c.Close()
			r.serveConn(c)
		}()
	}
}

// serveConn answers c's queries in order until it ends, idles, sends
// something that is no query, or has had maxConnQuerys.
func (r *Resolver) serveConn(c net.Conn) {
	for range maxConnQuerys {
		c.SetReadDeadline(time.Now().Add(idleTCP))
		q, err := readMsg(c, MaxQuery)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		a := r.answer(ctx, q, true)
		cancel()
		if a == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(Timeout))
		if writeMsg(c, a) != nil {
			return
		}
	}
}

// readMsg reads one length-prefixed message of at most max bytes.
func readMsg(c io.Reader, max int) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n == 0 || n > max {
		return nil, errors.New("dns over tcp: bad message length")
	}
	m := make([]byte, n)
	if _, err := io.ReadFull(c, m); err != nil {
		return nil, err
	}
	return m, nil
}

// writeMsg writes m with its length prefix, in one write.
func writeMsg(c io.Writer, m []byte) error {
	if len(m) > maxAnswerTCP {
		return errors.New("dns over tcp: message too long")
	}
	b := make([]byte, 2+len(m))
	binary.BigEndian.PutUint16(b, uint16(len(m)))
	copy(b[2:], m)
	_, err := c.Write(b)
	return err
}

// forwardTCP sends q to the upstream resolver over TCP and returns its
// answer (whole: up to 64 KiB).
func (r *Resolver) forwardTCP(ctx context.Context, q []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.Upstream)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if err := writeMsg(c, q); err != nil {
		return nil, err
	}
	return readMsg(c, maxAnswerTCP)
}
