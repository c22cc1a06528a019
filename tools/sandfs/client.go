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
// (new, ls, exec, kill, cp): the same as `sandfs mount`.
type clientFlags struct {
	addr, token, tokenFile string
}

func (f *clientFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.addr, "addr", "", "9P server, unix:PATH or tcp:HOST:PORT (default: $SANDFS_ADDR, else "+client.DefaultAddr+" if it exists, else the daemon `make run` left in "+client.EndpointFile+")")
	fl.StringVar(&f.token, "token", os.Getenv("SANDFS_TOKEN"), "attach token (required over TCP; default $SANDFS_TOKEN)")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the token from this file")
}

// dial connects to the daemon (10 s to answer).
func (f *clientFlags) dial() (*client.Client, error) {
	tok := f.token
	if f.addr == "" {
		e, err := client.DefaultEndpoint()
		if err != nil {
			return nil, err
		}
		f.addr = e.Addr
		if tok == "" && f.tokenFile == "" {
			if tok, err = e.Token(); err != nil {
				return nil, err
			}
		}
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, err
		}
		tok = strings.TrimSpace(string(b))
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
