package ctlfs

import (
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"syscall"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// consoleFile serves /sandboxes/<id>/console, read-only: the guest's
// serial console as the VMM logs it (boot messages, panics), read
// straight from the log file at any offset; it stays readable after the
// sandbox dies, until rm.
//
//	$ tail -3 console
//	[    0.412345] Run /sbin/init as init process
type consoleFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*consoleFile)(nil)

// Stat implements fs.Node.Stat.
func (f *consoleFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.
func (f *consoleFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	if flags.Writable() {
		return nil, errAccess
	}
	p := f.sb.ConsolePath()
	if p == "" {
		return nil, ctl.Errorf(syscall.ENOENT, "console: sandbox %q has no console log", f.sb.ID())
	}
	fl, err := os.Open(p)
	if err != nil {
		return nil, ctl.Errorf(syscall.ENOENT, "console: %v", err)
	}
	return &consoleHandle{f: fl}, nil
}

// consoleHandle is one open of console.
type consoleHandle struct{ f *os.File }

// Read implements fs.Handle.Read.
func (h *consoleHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// Write implements fs.Handle.Write.
func (h *consoleHandle) Write(context.Context, []byte, int64) (int, error) { return 0, errBadFD }

// Close implements fs.Handle.Close.
func (h *consoleHandle) Close() error { return h.f.Close() }
