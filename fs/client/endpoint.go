package client

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// EndpointFile is where `make run` leaves the address of a daemon that has
// no local unix socket (the daemon inside the lab, reached over TCP): the
// first line is the address, the second the path of the file holding the
// attach token. The token file keeps its own mode; this file holds no
// secret.
const EndpointFile = "/run/sandfs/endpoint"

// Endpoint is a daemon's address and the token to attach with.
type Endpoint struct {
	Addr      string // unix:PATH or tcp:HOST:PORT
	TokenFile string // "" for none (unix sockets need none)
}

// DefaultEndpoint finds the daemon a command without --addr talks to:
// $SANDFS_ADDR (with $SANDFS_TOKEN_FILE) if set; else the daemon's unix
// socket (DefaultAddr) if it exists; else EndpointFile if `make run` left
// one; else DefaultAddr, so that the error names the socket.
func DefaultEndpoint() (Endpoint, error) {
	if a := os.Getenv("SANDFS_ADDR"); a != "" {
		return Endpoint{Addr: a, TokenFile: os.Getenv("SANDFS_TOKEN_FILE")}, nil
	}
	def := Endpoint{Addr: DefaultAddr}
	if _, err := os.Stat(strings.TrimPrefix(DefaultAddr, "unix:")); err == nil {
		return def, nil
	}
	b, err := os.ReadFile(EndpointFile)
	if errors.Is(err, os.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return def, err
	}
	return ParseEndpoint(string(b))
}

// ParseEndpoint parses the text of an EndpointFile.
func ParseEndpoint(text string) (Endpoint, error) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) == 0 || len(lines) > 2 || !(strings.HasPrefix(lines[0], "unix:") || strings.HasPrefix(lines[0], "tcp:")) {
		return Endpoint{}, fmt.Errorf("%s: want an address (unix:PATH or tcp:HOST:PORT) and a token file path, one per line; got %q", EndpointFile, text)
	}
	e := Endpoint{Addr: strings.TrimSpace(lines[0])}
	if len(lines) == 2 {
		e.TokenFile = strings.TrimSpace(lines[1])
	}
	return e, nil
}

// Token reads the endpoint's token file ("" without one).
func (e Endpoint) Token() (string, error) {
	if e.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(e.TokenFile)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
