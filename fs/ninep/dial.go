package ninep

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// DialAddr connects to a sandfs 9P listener named as on the command line:
// "unix:PATH" or "tcp:HOST:PORT".
func DialAddr(ctx context.Context, addr string) (net.Conn, error) {
	network, address, ok := strings.Cut(addr, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("dial: bad address %q (want unix:PATH or tcp:HOST:PORT)", addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}
