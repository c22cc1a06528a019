package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"sync"
	"syscall"

	sfs "sandfs/fs"
)

// procFiles is the directory procs/<n>/, in listing order:
//
//	ctl     rw  write: one verb (ctlVerbs); read: "n state pid"
//	stdin   w   bytes to the process's stdin (or its terminal)
//	stdout  r   blocking stream: output as it arrives, EOF at the end
//	stderr  r   the same for stderr (empty with a pty)
//	status  r   "n running pid=P" | "n exited code=C pid=P" |
//	            "n killed signal=S pid=P" | "n failed errno=E" | "n new"
//	wait    r   blocks until the process ends, then the status line
//	err     r   text of the last failed ctl write, or empty
//	config  r   the ctl messages that set the process up, one per line,
//	            ending with its start line: replayable into a new clone
//
// Every open of one of them holds the slot open (proc.open, proc.close).
var procFiles = sfs.Table[*proc]{
	{Name: "ctl", Mode: 0o600, New: textFile(func(p *proc, _ context.Context) (string, error) { return p.ctlLine(), nil }, true)},
	{Name: "stdin", Mode: 0o200, New: procFile(func(p *proc) sfs.Handle { return &stdinHandle{p: p} })},
	{Name: "stdout", Mode: 0o400, New: procFile(func(p *proc) sfs.Handle { return &streamHandle{p: p, stream: 1} })},
	{Name: "stderr", Mode: 0o400, New: procFile(func(p *proc) sfs.Handle { return &streamHandle{p: p, stream: 2} })},
	{Name: "status", Mode: 0o444, New: textFile(func(p *proc, _ context.Context) (string, error) { return p.status(), nil }, false)},
	{Name: "wait", Mode: 0o444, New: textFile((*proc).wait, false)},
	{Name: "err", Mode: 0o444, New: textFile(func(p *proc, _ context.Context) (string, error) { return p.errLine(), nil }, false)},
	{Name: "config", Mode: 0o444, New: textFile(func(p *proc, _ context.Context) (string, error) { return p.config(), nil }, false)},
}

// slotFile is a file of procs/<n>/: its mode and how an open makes its
// handle.
type slotFile struct {
	p    *proc
	mode iofs.FileMode
	ino  uint64 // slotIno, set by procDir.Lookup
	open func(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error)
}

var _ sfs.Opener = (*slotFile)(nil)

// procFile is the row maker of a file whose handle is its own type.
func procFile(h func(p *proc) sfs.Handle) func(*proc, iofs.FileMode) sfs.Node {
	return func(p *proc, m iofs.FileMode) sfs.Node {
		return &slotFile{p: p, mode: m, open: func(context.Context, sfs.OpenFlags) (sfs.Handle, error) { return h(p), nil }}
	}
}

// textFile is the row maker of a text file (an sfs.TextFile, generated at the
// first read and again when a read starts at 0), writable as ctl if
// ctl is set.
func textFile(text func(p *proc, ctx context.Context) (string, error), ctl bool) func(*proc, iofs.FileMode) sfs.Node {
	return func(p *proc, m iofs.FileMode) sfs.Node {
		tf := sfs.TextFile{Mode: m, Gen: func(ctx context.Context, b *bytes.Buffer) error {
			s, err := text(p, ctx)
			b.WriteString(s)
			return err
		}}
		var n sfs.Node = &tf
		if ctl {
			n = &sfs.CtlFile{TextFile: tf, Msg: func(_ context.Context, b []byte) error { return p.ctl(b) }}
		}
		return &slotFile{p: p, mode: m, open: func(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
			return sfs.Open(ctx, n, flags)
		}}
	}
}

// Stat implements sfs.Node.Stat.
func (f *slotFile) Stat(context.Context) (sfs.Attr, error) {
	a := synthAttr(f.mode)
	a.Ino = f.ino
	return a, nil
}

// Open implements sfs.Opener: only for the access the mode shows (the
// agent's client is root, whom the modes do not stop), and only while the
// slot lives.
func (f *slotFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	if flags.Readable() && f.mode&0o400 == 0 || flags.Writable() && f.mode&0o200 == 0 {
		return nil, syscall.EACCES
	}
	if !f.p.open() {
		return nil, syscall.ENOENT
	}
	h, err := f.open(ctx, flags)
	if err != nil {
		f.p.close()
		return nil, err
	}
	sh := &slotHandle{Handle: h, p: f.p}
	if _, ok := h.(sfs.BlockingWriter); ok {
		return blockingSlotHandle{sh}, nil
	}
	return sh, nil
}

// slotHandle holds its slot open until Close.
type slotHandle struct {
	sfs.Handle
	p    *proc
	once sync.Once
}

// blockingSlotHandle is a slotHandle whose writes block (stdin).
type blockingSlotHandle struct{ *slotHandle }

// BlocksOnWrite implements sfs.BlockingWriter.
func (blockingSlotHandle) BlocksOnWrite() {}

// Close implements sfs.Handle.Close.
func (h *slotHandle) Close() error {
	err := h.Handle.Close()
	h.once.Do(h.p.close)
	return err
}

// streamHandle is an open stdout or stderr: a pipe, whose reads ignore
// the offset and consume; a read blocks until there is output or the
// stream ends (a zero-byte read), or its context ends (EINTR).
type streamHandle struct {
	p      *proc
	stream int // 1 stdout, 2 stderr
}

// Read implements sfs.Handle.Read.
func (h *streamHandle) Read(ctx context.Context, b []byte, _ int64) (int, error) {
	n, err := h.p.read(ctx, h.stream, b)
	if errors.Is(err, io.EOF) {
		return n, nil
	}
	return n, err
}

// Write implements sfs.Handle.Write.
func (h *streamHandle) Write(context.Context, []byte, int64) (int, error) {
	return 0, syscall.EBADF
}

// Close implements sfs.Handle.Close.
func (h *streamHandle) Close() error { return nil }

// stdinHandle is an open stdin: a write blocks while the pipe is full,
// until its context ends (the count written so far, or EINTR).
type stdinHandle struct{ p *proc }

// Read implements sfs.Handle.Read.
func (h *stdinHandle) Read(context.Context, []byte, int64) (int, error) {
	return 0, syscall.EBADF
}

// Write implements sfs.Handle.Write.
func (h *stdinHandle) Write(ctx context.Context, b []byte, _ int64) (int, error) {
	return h.p.writeStdin(ctx, b)
}

// Close implements sfs.Handle.Close.
func (h *stdinHandle) Close() error { return nil }

// BlocksOnWrite implements sfs.BlockingWriter.
func (h *stdinHandle) BlocksOnWrite() {}
