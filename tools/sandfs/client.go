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
	fl.StringVar(&f.addr, "addr", client.DefaultAddr, "9P server, unix:PATH or tcp:HOST:PORT")
	fl.StringVar(&f.token, "token", os.Getenv("SANDFS_TOKEN"), "attach token (required over TCP; default $SANDFS_TOKEN)")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the token from this file")
}

// dial connects to the daemon (10 s to answer).
func (f *clientFlags) dial() (*client.Client, error) {
	tok := f.token
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
// positional arguments (up to a "--"), returning the positionals.
func parseInterspersed(fl *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fl.Parse(args); err != nil {
			return nil, err
		}
		args = fl.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
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
