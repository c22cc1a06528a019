// Command treebench times, through the file tree directly (fs/client
// over 9P, as `sandfs` does), the operations test/e2b/bench.mjs times
// through the E2B SDK: create, run `true` (bash -l -c, as user, as the
// SDK runs it), write and read 1 MiB, kill. It prints one line per
// operation, "tree <op> <median ms>", for test/e2b/bench.sh.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"sandfs/fs/client"
)

func main() {
	addr := flag.String("addr", "tcp:127.0.0.1:5640", "the daemon's 9P address")
	tokenFile := flag.String("token-file", "", "file holding the TCP token")
	n := flag.Int("n", 5, "rounds")
	flag.Parse()
	tok := ""
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fail(err)
		}
		tok = strings.TrimSpace(string(b))
	}
	c, err := client.Dial(context.Background(), *addr, tok)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	times := map[string][]time.Duration{}
	data := make([]byte, 1<<20)
	rand.Read(data)
	for range *n {
		if err := round(c, data, times); err != nil {
			fail(err)
		}
	}
	for _, op := range []string{"create", "run", "write1M", "read1M", "kill"} {
		fmt.Printf("tree %s %.1f\n", op, median(times[op]))
	}
}

// round does each operation once and adds its time to times.
func round(c *client.Client, data []byte, times map[string][]time.Duration) error {
	timed := func(op string, fn func() error) error {
		t := time.Now()
		err := fn()
		times[op] = append(times[op], time.Since(t))
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	}
	var id string
	if err := timed("create", func() (err error) {
		id, err = c.New(client.NewOptions{Template: "base"})
		return err
	}); err != nil {
		return err
	}
	err := timed("run", func() error {
		st, err := c.Exec(context.Background(), id, client.ExecOptions{Argv: []string{"/bin/bash", "-l", "-c", "true"}, User: "user"})
		if err == nil && st.ExitCode() != 0 {
			err = fmt.Errorf("exit %d", st.ExitCode())
		}
		return err
	})
	if err == nil {
		err = timed("write1M", func() error {
			_, err := c.CopyTo(bytes.NewReader(data), client.Remote{ID: id, Path: "/tmp/big"}, "", 0o644)
			return err
		})
	}
	if err == nil {
		err = timed("read1M", func() error {
			var b bytes.Buffer
			_, err := c.CopyFrom(client.Remote{ID: id, Path: "/tmp/big"}, &b)
			if err == nil && !bytes.Equal(b.Bytes(), data) {
				err = io.ErrUnexpectedEOF
			}
			return err
		})
	}
	if kerr := timed("kill", func() error {
		if err := c.Kill(id); err != nil {
			return err
		}
		return c.WriteMsg("ctl", "rm "+id, "err")
	}); err == nil {
		err = kerr
	}
	return err
}

// median of ds in milliseconds.
func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "treebench:", err)
	os.Exit(1)
}
