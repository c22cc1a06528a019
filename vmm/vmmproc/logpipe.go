package vmmproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Detached VMM's stderr is a named pipe beside its control socket,
//
//	<socket>.log   FIFO, root's 0600: the VMM holds its write end
//
// not an anonymous pipe: the daemon that launched the VMM reads it into
// vmm.log, and when that daemon dies the VMM's writes fail (EPIPE; it
// ignores SIGPIPE) until a later daemon that adopts it opens the FIFO
// again (Process.ReadLog) and gets the same pipe, so the adopted VMM's
// log lines (its SIGUSR1 virtio dump among them) reach vmm.log again.
// With an anonymous pipe they were lost for the VMM's remaining life.
const logFIFOSuffix = ".log"

// logDrain bounds how long the end of a process waits for the last of
// its stderr to be copied (another holder of the FIFO's write end would
// otherwise hold the reap).
const logDrain = time.Second

// logThroughFIFO makes the named pipe <socket>.log the process's stderr
// and copies what comes out of it to w until the last writer closes it.
// The parent's write end goes to sp's closers: the child keeps its own.
func (p *Process) logThroughFIFO(w io.Writer, sp *spawn) error {
	path := p.cfg.Socket + logFIFOSuffix
	os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("log pipe: %w", err)
	}
	r, err := openFIFO(path)
	if err != nil {
		return err
	}
	// A reader is open, so this open does not wait.
	wr, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		r.Close()
		return fmt.Errorf("log pipe: %w", err)
	}
	sp.closers = append(sp.closers, wr)
	p.cmd.Stderr = wr
	p.logPipe, p.logCopied = r, copyLog(r, w)
	return nil
}

// openFIFO opens the named pipe at path for reading, without waiting for
// a writer and never through a symlink or anything but a FIFO.
func openFIFO(path string) (*os.File, error) {
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("log pipe: %w", err)
	}
	if fi, err := r.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		r.Close()
		return nil, fmt.Errorf("log pipe: %s is not a FIFO", path)
	}
	return r, nil
}

// copyLog copies r to w in the background until r's writers are gone,
// then closes r and also, if not nil, f; the channel it returns is
// closed then.
func copyLog(r *os.File, w io.Writer, f ...*os.File) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(w, r)
		r.Close()
		for _, c := range f {
			c.Close()
		}
	}()
	return done
}

// waitLog waits (at most logDrain) for the copy of the process's stderr
// to end, so that its tail and log file are complete, and then ends it.
func (p *Process) waitLog() {
	if p.logCopied == nil {
		return
	}
	select {
	case <-p.logCopied:
	case <-time.After(logDrain):
		p.logPipe.Close()
		<-p.logCopied
	}
}

// ReadLog appends the stderr of an adopted Detached VMM (Adopt) to the
// log file at path (vmm.log, capped at LogMax with what it holds
// counted), from its named pipe: the lines it writes from now on. A VMM
// launched before the pipe existed has none: ReadLog then does nothing.
// Call it once, right after Adopt.
func (p *Process) ReadLog(path string) error {
	r, err := openFIFO(p.cfg.Socket + logFIFOSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	lf, err := openLog(path)
	if err != nil {
		r.Close()
		return err
	}
	copyLog(r, io.MultiWriter(p.stderr, capFile(lf, LogMax, "\n[sandfs: vmm.log truncated]\n")), lf)
	return nil
}
