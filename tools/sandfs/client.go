package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"sandfs/fs/client"
)

// clientFlags are the connection flags of the commands built on the tree
// (new, ls, exec, kill, cp) and of `sandfs mount`.
type clientFlags struct {
	addr, argvToken, tokenFile string
}

func (f *clientFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.addr, "addr", "", "9P server, unix:PATH or tcp:HOST:PORT (default: $SANDFS_ADDR, else "+client.DefaultAddr+" if it exists, else the daemon `make run` left in "+client.EndpointFile+")")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the attach token (TCP only) from this file; default $SANDFS_TOKEN")
	fl.StringVar(&f.argvToken, "token", "", "refused: a command line is visible to every local user; use --token-file or $SANDFS_TOKEN")
}

// errArgvToken refuses --token.
var errArgvToken = errors.New("--token is refused: every local user can read a command line (ps, /proc/PID/cmdline); use --token-file F or $SANDFS_TOKEN")

// token returns the attach name for f.addr: "" on a unix socket (guarded
// by its mode; its attach name must be empty, whatever $SANDFS_TOKEN
// says); over TCP the content of --token-file, else $SANDFS_TOKEN.
func (f *clientFlags) token() (string, error) {
	if f.argvToken != "" {
		return "", errArgvToken
	}
	if f.addr == "" {
		// No --addr: the default endpoint, with its token file unless
		// one was given.
		e, err := client.DefaultEndpoint()
		if err != nil {
			return "", err
		}
		f.addr = e.Addr
		if f.tokenFile == "" && os.Getenv("SANDFS_TOKEN") == "" {
			return e.Token()
		}
	}
	if strings.HasPrefix(f.addr, "unix:") {
		return "", nil
	}
	if f.tokenFile == "" {
		return os.Getenv("SANDFS_TOKEN"), nil
	}
	return client.Endpoint{Addr: f.addr, TokenFile: f.tokenFile}.Token()
}

// dial connects to the daemon (10 s to answer).
func (f *clientFlags) dial() (*client.Client, error) {
	tok, err := f.token()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Dial(ctx, f.addr, tok)
}

// parseInterspersed parses flags that may come before or after the
// positional arguments and returns the positionals. Everything after a
// "--" is positional; so is everything after the stopAfter-th positional
// and the flags right after it (0: no such limit), which lets `exec ID
// CMD -x` pass -x to CMD.
func parseInterspersed(fl *flag.FlagSet, args []string, stopAfter int) ([]string, error) {
	var pos []string
	for {
		if stopAfter > 0 && len(pos) == stopAfter {
			if err := fl.Parse(args); err != nil { // flags right after, then a "--" or not
				return nil, err
			}
			return append(pos, fl.Args()...), nil
		}
		if len(args) > 0 && args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if err := fl.Parse(args); err != nil {
			return nil, err
		}
		rest := fl.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // Parse ate the "--"
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// fail prints err for command name and returns exit status 1.
func fail(name string, err error) int {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Text != "" {
		fmt.Fprintf(os.Stderr, "sandfs %s: %s (%v)\n", name, ce.Text, ce.Errno)
	} else {
		fmt.Fprintf(os.Stderr, "sandfs %s: %v\n", name, err)
	}
	return 1
}
