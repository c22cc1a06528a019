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

	"github.com/hugelgupf/p9/p9"

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
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
// When ctx ends first, the process is sent SIGKILL and Exec returns
// ctx's error at once; the slot's files are released in the background
// once the process's output and status have been read (a guest that
// answers nothing more keeps them until the daemon gives up on it).
func (c *Client) Exec(ctx context.Context, id string, o ExecOptions) (Status, error) {
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	p, err := c.startProc(id, o)
	if err != nil {
		return Status{}, err
	}
	// The wait file is opened and read beside the output, so that its
	// round trips overlap the output's and the status is there when the
	// output ends.
	type result struct {
		st  Status
		err error
	}
	waited := make(chan result, 1)
	go func() {
		st, err := p.wait()
		waited <- result{st, err}
	}()
	outputDone := p.copyOutput(o.Stdout, o.Stderr)
	if o.Stdin != nil {
		go p.feedStdin(o.Stdin)
	}
	stop := make(chan struct{})
	if o.Signals != nil {
		go p.forwardSignals(o.Signals, stop)
	}
	ended := make(chan result, 1)
	go func() {
		if err := outputDone(); err != nil {
			ended <- result{err: err}
			return
		}
		ended <- <-waited
	}()
	select {
	case r := <-ended:
		close(stop)
		p.close()
		return r.st, r.err
	case <-ctx.Done():
		go func() {
			p.clone.Msg("signal 9", "")
			<-ended
			close(stop)
			p.close()
		}()
		return Status{}, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	}
}

// execProc is the process slot Exec drives: its clone handle, which is
// its ctl, and where its files are.
type execProc struct {
	c       *Client
	clone   *File
	dir     string  // sandboxes/<id>/procs/<n>/
	dirf    p9.File // dir, walked
	errPath string  // sandboxes/<id>/err
}

// startProc takes a slot in sandbox id's procs/ and starts o's command
// in it (startMsgs).
func (c *Client) startProc(id string, o ExecOptions) (_ *execProc, err error) {
	dir := "sandboxes/" + id + "/procs/"
	errPath := "sandboxes/" + id + "/err"
	clone, err := c.Open(dir+"clone", syscall.O_RDWR)
	if err != nil {
		return nil, c.explain("open "+dir+"clone", err.(*Error).Errno, errPath)
	}
	defer func() {
		if err != nil {
			clone.Close()
		}
	}()
	b, err := readSlot(clone)
	if err != nil {
		return nil, err
	}
	for _, m := range startMsgs(o) {
		if err := clone.Msg(m, errPath); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return nil, &StartError{e}
			}
			return nil, err
		}
	}
	p := &execProc{c: c, clone: clone, dir: dir + strings.TrimSpace(string(b)) + "/", errPath: errPath}
	if _, p.dirf, err = c.root.Walk(sfs.SplitPath(p.dir)); err != nil {
		return nil, c.explain("walk "+p.dir, errno(err), errPath)
	}
	return p, nil
}

// readSlot reads the slot number from an open procs/clone: one read
// ("n\n"), more only if that was short.
func readSlot(clone *File) ([]byte, error) {
	b := make([]byte, 32)
	n, err := clone.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n > 0 && b[n-1] == '\n' {
		return b[:n], nil
	}
	rest, err := clone.ReadAllMax(MaxReply)
	return append(b[:n], rest...), err
}

// open opens the process's file name, walking from its directory.
func (p *execProc) open(name string, flags int) (*File, error) {
	return p.c.openAt(p.dirf, p.dir+name, []string{name}, flags)
}

// close releases the process's clone (its ctl) and directory fid.
func (p *execProc) close() {
	p.clone.Close()
	p.dirf.Close()
}

// startMsgs are the ctl messages that set up o's process and start it.
func startMsgs(o ExecOptions) []string {
	var msgs []string
	if o.User != "" {
		msgs = append(msgs, ctlMsg("user", o.User))
	}
	if o.Cwd != "" {
		msgs = append(msgs, ctlMsg("cwd", o.Cwd))
	}
	if len(o.Env) > 0 {
		msgs = append(msgs, ctlMsg("env", o.Env...))
	}
	if o.Stdin == nil {
		msgs = append(msgs, "stdin off")
	}
	return append(msgs, ctlMsg("start", o.Argv...))
}

// ctlMsg is the message verb with args, each quoted as needed.
func ctlMsg(verb string, args ...string) string {
	m := verb
	for _, a := range args {
		m += " " + msg.Quote(a)
	}
	return m
}

// copyOutput copies the process's stdout and stderr to stdout and stderr
// (nil: discarded) as they come; the function it returns waits until
// both have ended and returns the first error.
func (p *execProc) copyOutput(stdout, stderr io.Writer) (wait func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	stream := func(name string, w io.Writer) {
		defer wg.Done()
		if w == nil {
			w = io.Discard
		}
		f, err := p.open(name, syscall.O_RDONLY)
		if err != nil {
			errs <- p.c.explain("open "+p.dir+name, err.(*Error).Errno, p.errPath)
			return
		}
		defer f.Close()
		if _, err := io.Copy(w, f); err != nil {
			errs <- p.c.explain("read "+p.dir+name, msg.Errno(err), p.errPath)
		}
	}
	wg.Add(2)
	go stream("stdout", stdout)
	go stream("stderr", stderr)
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// feedStdin copies r to the process's stdin, then closes it.
func (p *execProc) feedStdin(r io.Reader) {
	f, err := p.open("stdin", syscall.O_WRONLY)
	if err != nil {
		return
	}
	io.Copy(f, r) // EPIPE once the process is gone: fine
	f.Close()
	p.clone.Msg("closestdin", "")
}

// forwardSignals writes `signal N` to the process's ctl for each signal
// from sigs until stop is closed.
func (p *execProc) forwardSignals(sigs <-chan os.Signal, stop <-chan struct{}) {
	for {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				p.clone.Msg(fmt.Sprintf("signal %d", int(sig)), "")
			}
		case <-stop:
			return
		}
	}
}

// wait reads the process's wait file: its status once it has ended.
func (p *execProc) wait() (Status, error) {
	w, err := p.open("wait", syscall.O_RDONLY)
	if err != nil {
		return Status{}, p.c.explain("open "+p.dir+"wait", err.(*Error).Errno, p.errPath)
	}
	defer w.Close()
	line, err := w.ReadAllMax(MaxReply)
	if err != nil {
		return Status{}, p.c.explain("read "+p.dir+"wait", msg.Errno(err), p.errPath)
	}
	return parseStatus(string(line)), nil
}
