package ctl

import (
	"context"
	"sync"
)

// auditKeep is how many of a sandbox's last net/audit lines are kept for
// a reader that opens the file later.
const auditKeep = 1000

// auditLog is a sandbox's net/audit stream: the last auditKeep lines,
// each with a sequence number, and readers that wait for the next. Its
// zero value is ready.
type auditLog struct {
	mu      sync.Mutex // guards the fields below
	lines   []string   // oldest first
	first   uint64     // sequence number of lines[0]
	changed chan struct{}
}

// add appends line (a network's audit line) and wakes the readers.
func (l *auditLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > auditKeep {
		drop := len(l.lines) - auditKeep
		l.lines = append(l.lines[:0:0], l.lines[drop:]...)
		l.first += uint64(drop)
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// read returns the lines from sequence number seq on (from the oldest
// kept if seq is older) and the number after them, waiting until there
// is one or ctx ends (its error).
func (l *auditLog) read(ctx context.Context, seq uint64) ([]string, uint64, error) {
	for {
		l.mu.Lock()
		end := l.first + uint64(len(l.lines))
		if seq < l.first {
			seq = l.first
		}
		if seq < end {
			out := append([]string(nil), l.lines[seq-l.first:]...)
			l.mu.Unlock()
			return out, end, nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, seq, ctx.Err()
		}
	}
}

// AuditRead returns s's net/audit lines from sequence number seq on (0:
// the oldest kept) and the number to read from next, blocking until
// there is one or ctx ends. Lines come from its machine's network
// (sbnet's format, docs/network.md) for as long as the sandbox exists,
// across rollbacks and restarts (the lines before a daemon restart are
// not kept).
func (s *Sandbox) AuditRead(ctx context.Context, seq uint64) ([]string, uint64, error) {
	return s.audit.read(ctx, seq)
}
