package ctlfs

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"strings"
	"sync"
	"syscall"

	sfs "sandfs/fs"
	"sandfs/fs/ninep"

	"sandfs/ctl"
	"sandfs/ctl/msg"
)

// execFile serves /sandboxes/<id>/exec, a command runner for plain shell.
// A write is one shell command: it starts `/bin/sh -c CMD` in the guest
// (through the agent's procs/clone, with stdin from /dev/null and stderr
// joined to stdout) and returns once the command runs. A read streams
// that command's combined output, in order, binary-safe, blocking until
// there is more, and ends (EOF) once the command has exited. Which
// command: the last one written on the same open, else the last one
// written on any open of this sandbox's exec. The output is a stream: it
// is read once. Two forms:
//
//	$ exec 3<>exec; echo 'make test' >&3; cat <&3     # one open
//	$ echo 'uname -r' > exec; cat exec                 # the last command
//	6.12.1-sandfs
//	$ cat execstatus                                   # its procs/ status line
//	4 exited code=0 pid=212
//
// The command is procs/<n> in the guest (n is the first word of
// execstatus), so procs/<n>/ctl can signal it. A command that cannot be
// started fails the write (errno, and the agent's text in err); one that
// starts and fails shows it in its output and exit code, as in a shell
// (`sh: nosuch: not found`, code=127).
type execFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*execFile)(nil)

// Stat implements fs.Node.Stat.
func (f *execFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.
func (f *execFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	return &execHandle{g: linkOf(f.sb)}, nil
}

// execHandle is one open of exec.
type execHandle struct {
	g *guestLink

	mu      sync.Mutex // protects the fields below (not held while reading)
	slot    string     // the command written on this open, "" none
	out     sfs.Handle // stdout of outSlot (a private session)
	outSlot string
	exited  chan error // the read of outSlot's wait file: nil when it ended, or why it failed
	stop    func()     // ends that read
	ended   bool       // outSlot's output is over and it has exited
}

var _ sfs.Handle = (*execHandle)(nil)

// setLast records slot n as the sandbox's last exec.
func (g *guestLink) setLast(n string) {
	g.execMu.Lock()
	g.lastExec = n
	g.execMu.Unlock()
}

// last is the slot of the sandbox's last exec, "" if none.
func (g *guestLink) last() string {
	g.execMu.Lock()
	defer g.execMu.Unlock()
	return g.lastExec
}

// execScript is what the guest's shell runs for command cmd: stdin
// from /dev/null and stderr joined to stdout for the whole script, in
// write order. (Stdin is the script's own redirection, not a "stdin
// off" ctl message: one round trip to the guest less per exec.)
func execScript(cmd string) string { return "exec </dev/null 2>&1\n" + cmd }

// startExec starts cmd in the guest and returns its slot: an open of
// procs/clone (walk, open), a read of the slot, one ctl message that
// starts the script, and the clunk. A refusal by the agent is explained
// by refused (procs/<n>/ctl and the agent's text, in err).
func (g *guestLink) startExec(ctx context.Context, cmd string) (string, error) {
	h, err := sfs.Open(ctx, g.r.File("procs/clone"), sfs.ReadWrite)
	if err != nil {
		return "", err
	}
	defer h.Close()
	slot, err := readSlot(ctx, h)
	if errors.Is(err, ninep.ErrBadReply) {
		err = ctl.Errorf(syscall.EIO, "guest: sandbox %q: bad reply to read procs/clone: %v", g.sb.ID(), err)
		g.sb.Fail("exec", err)
	}
	if err != nil {
		return "", err
	}
	m := "exec " + msg.Quote(execScript(cmd))
	if _, err := h.Write(ctx, []byte(m), 0); err != nil {
		return "", err
	}
	return slot, nil
}

// Write implements fs.Handle.Write: one command per write; a trailing
// newline is dropped.
func (h *execHandle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	cmd := strings.TrimSuffix(string(p), "\n")
	if strings.TrimSpace(cmd) == "" {
		err := ctl.Errorf(syscall.EINVAL, "exec: empty command")
		h.g.sb.Fail("exec", err)
		return 0, err
	}
	slot, err := h.g.startExec(ctx, cmd)
	if err != nil {
		return 0, err
	}
	h.g.setLast(slot)
	h.mu.Lock()
	h.slot = slot
	h.mu.Unlock()
	return len(p), nil
}

// output returns the open stdout of the command a read follows and
// the channel on which its exit is told (nil: none yet, or it has
// ended). A new command's stdout is opened, and its wait file opened
// and read at the same time, so that its exit is known as soon as its
// output ends: the round trips of the wait overlap the output's.
func (h *execHandle) output(ctx context.Context) (sfs.Handle, chan error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slot := h.slot
	if slot == "" {
		slot = h.g.last()
	}
	if slot == "" {
		return nil, nil, nil // nothing run yet: empty
	}
	if h.out == nil || h.outSlot != slot {
		h.closeLocked()
		out, err := sfs.Open(ctx, h.g.r.File("procs/"+slot+"/stdout"), sfs.ReadOnly)
		if err != nil {
			return nil, nil, err
		}
		h.out, h.outSlot, h.ended = out, slot, false
		h.waitLocked()
	}
	if h.ended {
		return nil, nil, nil
	}
	return h.out, h.exited, nil
}

// waitLocked starts the read of outSlot's wait file. h.mu held.
func (h *execHandle) waitLocked() {
	wctx, stop := context.WithCancel(context.Background())
	exited, path := make(chan error, 1), "procs/"+h.outSlot+"/wait"
	go func() {
		_, err := h.g.readLine(wctx, path, 256)
		exited <- err
	}()
	h.exited, h.stop = exited, stop
}

// closeLocked closes the output and ends the wait of the command
// followed. h.mu held.
func (h *execHandle) closeLocked() {
	if h.out != nil {
		h.out.Close()
		h.stop()
	}
	h.out, h.exited, h.stop = nil, nil, nil
}

// Read implements fs.Handle.Read (offsets are ignored: a stream).
func (h *execHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	out, exited, err := h.output(ctx)
	if out == nil || err != nil {
		return 0, err
	}
	n, err := out.Read(ctx, p, 0)
	if n > 0 || err != nil {
		return n, err
	}
	// The output has ended: wait for the exit, so that execstatus is
	// final when the reader sees EOF.
	select {
	case err = <-exited:
	case <-ctx.Done():
		return 0, ctl.Errorf(syscall.EINTR, "read exec: interrupted")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.out != out {
		return 0, err
	}
	if err != nil {
		h.stop()
		h.waitLocked() // the next read waits again
		return 0, err
	}
	h.ended = true
	return 0, nil
}

// Close implements fs.Handle.Close.
func (h *execHandle) Close() error {
	h.mu.Lock()
	h.closeLocked()
	h.mu.Unlock()
	return nil
}

// execStatusFile serves /sandboxes/<id>/execstatus: the agent's status
// line of the last command written to exec (procs/<n>/status), e.g.
//
//	4 exited code=0 pid=212
//	4 running pid=212
//	4 killed signal=9 pid=212
//
// and nothing before the first exec.
func execStatusFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(ctx context.Context, b *bytes.Buffer) error {
		g := linkOf(sb)
		slot := g.last()
		if slot == "" {
			return nil
		}
		line, err := g.readLine(ctx, "procs/"+slot+"/status", 512)
		if err != nil {
			return err
		}
		b.WriteString(line)
		b.WriteByte('\n')
		return nil
	}}
}
