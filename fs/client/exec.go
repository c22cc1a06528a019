package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"sandfs/ctl/msg"
)

// ExecOptions describe one command run through procs/.
type ExecOptions struct {
	Argv   []string // command and arguments (no shell)
	Cwd    string   // "" for the user's home
	User   string   // "" for root
	Env    []string // K=V
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Signals, if set, delivers signals to forward to the process
	// (written as `signal N` to its ctl) until Exec returns.
	Signals <-chan os.Signal
}

// Status is how a process ended, from its procs/<n>/wait line.
type Status struct {
	Line   string // e.g. "3 exited code=0 pid=812"
	State  string // exited, killed, failed
	Code   int    // exit code (exited)
	Signal int    // signal number (killed)
}

// ExitCode is the status as a shell would give it: the code, 128+signal.
func (s Status) ExitCode() int {
	switch s.State {
	case "exited":
		return s.Code
	case "killed":
		return 128 + s.Signal
	}
	return 127
}

func parseStatus(line string) Status {
	st := Status{Line: strings.TrimSpace(line)}
	f := strings.Fields(st.Line)
	if len(f) > 1 {
		st.State = f[1]
	}
	for _, kv := range f[min(2, len(f)):] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "code":
			st.Code = n
		case "signal":
			st.Signal = n
		}
	}
	return st
}

// StartError is a command that could not be started: the agent refused
// a ctl message (no such command or cwd, bad user...).
type StartError struct{ Err *Error }

func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying *Error.
func (e *StartError) Unwrap() error { return e.Err }

// Exec runs a command in sandbox id through its procs/: procs/clone, the
// setup messages, `start`; then stdout and stderr are copied to
// o.Stdout and o.Stderr as they come, o.Stdin is copied to the process's
// stdin (and closed at EOF), and Exec returns the status from
// procs/<n>/wait once the process has ended and its output is read.
// A command that cannot start is a *StartError with the agent's text.
func (c *Client) Exec(ctx context.Context, id string, o ExecOptions) (Status, error) {
	dir := "sandboxes/" + id + "/procs/"
	errPath := "sandboxes/" + id + "/err"
	clone, err := c.Open(dir+"clone", syscall.O_RDWR)
	if err != nil {
		return Status{}, c.explain("open "+dir+"clone", err.(*Error).Errno, errPath)
	}
	defer clone.Close()
	b, err := io.ReadAll(clone)
	if err != nil {
		return Status{}, err
	}
	n := strings.TrimSpace(string(b))
	pdir := dir + n + "/"
	var msgs []string
	if o.User != "" {
		msgs = append(msgs, "user "+msg.Quote(o.User))
	}
	if o.Cwd != "" {
		msgs = append(msgs, "cwd "+msg.Quote(o.Cwd))
	}
	if len(o.Env) > 0 {
		m := "env"
		for _, kv := range o.Env {
			m += " " + msg.Quote(kv)
		}
		msgs = append(msgs, m)
	}
	if o.Stdin == nil {
		msgs = append(msgs, "stdin off")
	}
	start := "start"
	for _, a := range o.Argv {
		start += " " + msg.Quote(a)
	}
	msgs = append(msgs, start)
	for _, m := range msgs {
		if err := clone.Msg(m, errPath); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return Status{}, &StartError{e}
			}
			return Status{}, err
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	stream := func(name string, w io.Writer) {
		defer wg.Done()
		if w == nil {
			w = io.Discard
		}
		f, err := c.Open(pdir+name, syscall.O_RDONLY)
		if err != nil {
			errs <- c.explain("open "+pdir+name, err.(*Error).Errno, errPath)
			return
		}
		defer f.Close()
		if _, err := io.Copy(w, f); err != nil {
			errs <- c.explain("read "+pdir+name, msg.Errno(err), errPath)
		}
	}
	wg.Add(2)
	go stream("stdout", o.Stdout)
	go stream("stderr", o.Stderr)
	if o.Stdin != nil {
		go func() {
			f, err := c.Open(pdir+"stdin", syscall.O_WRONLY)
			if err != nil {
				return
			}
			io.Copy(f, o.Stdin) // EPIPE once the process is gone: fine
			f.Close()
			clone.Msg("closestdin", "")
		}()
	}
	stop := make(chan struct{})
	defer close(stop)
	if o.Signals != nil {
		go func() {
			for {
				select {
				case s := <-o.Signals:
					if sig, ok := s.(syscall.Signal); ok {
						clone.Msg(fmt.Sprintf("signal %d", int(sig)), "")
					}
				case <-stop:
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Status{}, err
	}
	w, err := c.Open(pdir+"wait", syscall.O_RDONLY)
	if err != nil {
		return Status{}, c.explain("open "+pdir+"wait", err.(*Error).Errno, errPath)
	}
	defer w.Close()
	line, err := io.ReadAll(w)
	if err != nil {
		return Status{}, c.explain("read "+pdir+"wait", msg.Errno(err), errPath)
	}
	return parseStatus(string(line)), nil
}
