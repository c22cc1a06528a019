package ctlfs

import (
	"context"
	iofs "io/fs"
	"strings"
	"sync"
	"syscall"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// netAuditFile serves net/audit, a stream: a read returns the lines kept
// (the last 1000) and then blocks until the next, one line per
// connection allowed or refused and per DNS answer given or refused
// (docs/network.md), e.g.
//
//	2026-12-01T19:01:01.778Z tcp 198.51.100.1:8080 allowed.test allow 60
//	2026-12-01T19:01:04.500Z dns - other.test refused 0
//
// It never ends: `cat net/audit` follows it until interrupted (EINTR;
// the next read goes on where it was) or closed.
type netAuditFile struct {
	sb   *ctl.Sandbox
	mode iofs.FileMode
}

var _ sfs.Opener = (*netAuditFile)(nil)

// Stat implements fs.Node.Stat.
func (f *netAuditFile) Stat(context.Context) (sfs.Attr, error) { return sfs.FileAttr(f.mode), nil }

// Open implements fs.Opener.Open: the handle reads from the oldest line
// kept.
func (f *netAuditFile) Open(ctx context.Context, flags sfs.OpenFlags) (sfs.Handle, error) {
	if flags.Writable() {
		return nil, errAccess
	}
	closed, cancel := context.WithCancel(context.Background())
	return &netAuditHandle{sb: f.sb, closed: closed, close: cancel}, nil
}

// netAuditHandle is one open of net/audit.
type netAuditHandle struct {
	sb     *ctl.Sandbox
	closed context.Context // done once the handle is closed
	close  context.CancelFunc

	mu      sync.Mutex // serializes reads; guards the fields below
	seq     uint64     // the next line's sequence number
	pending []byte     // read but not yet returned
}

// Read implements fs.Handle.Read. The offset is ignored: a stream.
func (h *netAuditHandle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) == 0 {
		ctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(h.closed, cancel)
		lines, next, err := h.sb.AuditRead(ctx, h.seq)
		stop()
		cancel()
		if err != nil {
			return 0, syscall.EINTR
		}
		h.seq = next
		h.pending = []byte(strings.Join(lines, "\n") + "\n")
	}
	n := copy(p, h.pending)
	h.pending = h.pending[n:]
	return n, nil
}

// Write implements fs.Handle.Write.
func (h *netAuditHandle) Write(context.Context, []byte, int64) (int, error) { return 0, errBadFD }

// Close implements fs.Handle.Close: a blocked Read returns.
func (h *netAuditHandle) Close() error {
	h.close()
	return nil
}
