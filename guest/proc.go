package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"

	"golang.org/x/sys/unix"
)

// procState is the life of a process slot:
//
//	new ──start──▶ running ──exit──▶ exited | killed
//	 └───start fails──▶ failed
type procState int

const (
	stNew procState = iota
	stRunning
	stExited
	stKilled
	stFailed
)

func (s procState) String() string {
	return [...]string{"new", "running", "exited", "killed", "failed"}[s]
}

func (s procState) done() bool { return s >= stExited }

// maxBuffered is how much unread output one stream holds before the pump
// stops reading the pipe, so the process blocks in write(2) as it would on
// a full pipe: nothing is ever dropped, and memory stays bounded.
const maxBuffered = 1 << 20

// outbuf is one output stream (stdout or stderr) of a process.
type outbuf struct {
	buf []byte // unread output
	eof bool   // the pipe is closed and everything read from it is in buf
}

// proc is one process record. It is owned by the procTable, not by any
// fid or connection, so a process outlives the 9P connection that started
// it. See the package doc for when it is freed.
type proc struct {
	n   int
	tab *procTable

	mu      sync.Mutex // guards everything below
	state   procState
	spec    spec
	pid     int
	code    int           // exit status, state exited
	sig     int           // terminating signal, state killed
	errno   syscall.Errno // why start failed, state failed
	errText string        // text of the last failed ctl write (the err file)
	stdin   *os.File      // pipe write end, or the pty master; nil once closed
	ptm     *os.File      // pty master, nil without a pty
	out     outbuf
	errs    outbuf
	change  chan struct{} // closed and replaced on every change above
	opens   int           // open handles on this slot's files
	ended   time.Time     // when the state became done
	freed   bool          // removed from the table
}

func newProc(n int, t *procTable) *proc {
	return &proc{n: n, tab: t, change: make(chan struct{})}
}

// notifyLocked wakes everyone blocked on p.change. Requires p.mu.
func (p *proc) notifyLocked() {
	close(p.change)
	p.change = make(chan struct{})
}

// statusLocked is the status line (see statusFile). Requires p.mu.
func (p *proc) statusLocked() string {
	switch p.state {
	case stRunning:
		return fmt.Sprintf("%d running pid=%d\n", p.n, p.pid)
	case stExited:
		return fmt.Sprintf("%d exited code=%d pid=%d\n", p.n, p.code, p.pid)
	case stKilled:
		return fmt.Sprintf("%d killed signal=%d pid=%d\n", p.n, p.sig, p.pid)
	case stFailed:
		return fmt.Sprintf("%d failed errno=%d\n", p.n, int(p.errno))
	}
	return fmt.Sprintf("%d new\n", p.n)
}

func (p *proc) config() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spec.config()
}

func (p *proc) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusLocked()
}

// ctlLine is what reading ctl returns: "n state pid".
func (p *proc) ctlLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d %s %d\n", p.n, p.state, p.pid)
}

// wait blocks until the process is done (or ctx ends, or the record is
// freed) and returns the status line.
func (p *proc) wait(ctx context.Context) (string, error) {
	p.mu.Lock()
	for !p.state.done() && !p.freed {
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", msg.Errorf(syscall.EINTR, "wait: connection closed")
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	return p.statusLocked(), nil
}

// read takes up to len(b) bytes of unread output from stream (1 stdout,
// 2 stderr), blocking until there is some. It returns io.EOF once the
// stream is closed and drained, the start failed or the record is freed;
// EINTR when ctx (the connection) ends.
func (p *proc) read(ctx context.Context, stream int, b []byte) (int, error) {
	p.mu.Lock()
	for {
		ob := &p.out
		if stream == 2 {
			ob = &p.errs
		}
		if len(ob.buf) > 0 {
			n := copy(b, ob.buf)
			ob.buf = ob.buf[n:]
			if len(ob.buf) == 0 {
				ob.buf = nil
			}
			p.notifyLocked() // the pump may be waiting for room
			p.mu.Unlock()
			return n, nil
		}
		if ob.eof || p.freed || p.state == stFailed {
			p.mu.Unlock()
			return 0, io.EOF
		}
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, msg.Errorf(syscall.EINTR, "read: connection closed")
		}
		p.mu.Lock()
	}
}

// pump copies a process's output pipe (or pty master) into ob until EOF.
func (p *proc) pump(f *os.File, ob *outbuf) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		for len(ob.buf) >= maxBuffered && !p.freed {
			ch := p.change
			p.mu.Unlock()
			<-ch
			p.mu.Lock()
		}
		p.mu.Unlock()
		n, err := f.Read(buf)
		p.mu.Lock()
		if n > 0 && !p.freed {
			ob.buf = append(ob.buf, buf[:n]...)
		}
		if err != nil {
			// EOF for a pipe; EIO for a pty master once no slave is open.
			ob.eof = true
		}
		p.notifyLocked()
		if err != nil {
			// A pty master is closed only once the process is gone:
			// closing it hangs the terminal up, and a process that has
			// closed its terminal fds but not yet exited (cat closes
			// stdin and stdout at the end of main) would die of SIGHUP.
			for f == p.ptm && !p.state.done() && !p.freed {
				ch := p.change
				p.mu.Unlock()
				<-ch
				p.mu.Lock()
			}
			p.mu.Unlock()
			f.Close()
			return
		}
		p.mu.Unlock()
	}
}

// writeStdin writes b to the process's stdin (or its terminal). It
// blocks while the pipe is full; it ends early, with what was written
// (EINTR if nothing), when ctx ends (flush, clunk, connection gone), and
// with EPIPE when stdin is closed or the process exits.
func (p *proc) writeStdin(ctx context.Context, b []byte) (int, error) {
	p.mu.Lock()
	f, st := p.stdin, p.state
	p.mu.Unlock()
	if f == nil {
		switch {
		case st == stNew:
			return 0, msg.Errorf(syscall.EBUSY, "stdin: process not started")
		case st == stRunning:
			return 0, msg.Errorf(syscall.EPIPE, "stdin: closed")
		}
		return 0, msg.Errorf(syscall.EPIPE, "stdin: process %s", st)
	}
	written := 0
	for written < len(b) {
		// Pipes and the pty master are pollable: a deadline turns a
		// blocked write into a chance to look at ctx.
		f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := f.Write(b[written:])
		written += n
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() == nil {
				continue
			}
			if written > 0 {
				return written, nil
			}
			return 0, msg.Errorf(syscall.EINTR, "stdin: write interrupted")
		}
		if written > 0 {
			return written, nil
		}
		return 0, msg.Errorf(syscall.EPIPE, "stdin: %v", err)
	}
	return written, nil
}

// exited records the exit status; it is the reaper's callback.
func (p *proc) exited(ws unix.WaitStatus) {
	p.mu.Lock()
	if ws.Signaled() {
		p.state, p.sig = stKilled, int(ws.Signal())
	} else {
		p.state, p.code = stExited, ws.ExitStatus()
	}
	p.ended = time.Now()
	if p.stdin != nil && p.stdin != p.ptm {
		p.stdin.Close()
	}
	p.stdin = nil
	p.notifyLocked()
	p.mu.Unlock()
	p.tab.scheduleFree(p)
}
