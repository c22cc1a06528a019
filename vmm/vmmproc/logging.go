package vmmproc

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Logs a guest can fill. Two files in a sandbox's run directory hold text
// a guest writes or provokes: console (its serial output, written by the
// VMM) and vmm.log (the VMM's stderr, copied there by the daemon in
// Launch). Each is capped by one cappedWriter, ConsoleMax and LogMax
// bytes counting what the file already held, and notes the cut once. The
// vmm.log cap is applied by the daemon, so it holds even against a VMM
// that writes without end. Besides, the VMM's own log lines that a guest
// can provoke at MMIO speed (a refused virtio status or feature set, a bad
// descriptor chain, a vsock credit overrun) are rate-limited where they
// are made, by the VMM's log handler (newLogger): a flooding guest costs
// the VMM a map lookup per attempt and fills the log slowly, each
// message's lines carrying a count of those dropped before them.
const (
	// ConsoleMax bounds a sandbox's console file: the guest is not
	// trusted to keep its serial output small.
	ConsoleMax = 32 << 20
	// LogMax bounds a sandbox's vmm.log.
	LogMax = 8 << 20
)

// Rate limit of the VMM's log, per message text: logBurst records at
// once, then one per logEvery. Messages are the constant first arguments
// of slog calls, so their number is small; past logKeys distinct ones, the
// rest share one budget.
const (
	logBurst = 10
	logEvery = 10 * time.Second
	logKeys  = 256
)

// cappedWriter passes through up to left bytes, then writes note once and
// drops the rest. It never fails: a full disk or a full log must not stop
// the writer (the VMM's serial port, the daemon's copy of the VMM's
// stderr, which the VMM would otherwise block on).
type cappedWriter struct {
	w    io.Writer
	left int64
	note string
}

// capFile returns a cappedWriter that lets f (opened for append) grow to
// max bytes, note included; what a regular file already holds counts (a
// file already full got its note before).
func capFile(f *os.File, max int64, note string) *cappedWriter {
	left := max - int64(len(note))
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		left -= st.Size()
	}
	if left <= 0 {
		note = ""
	}
	return &cappedWriter{w: f, left: left, note: note}
}

// Write implements io.Writer.
func (c *cappedWriter) Write(p []byte) (int, error) {
	if n := min(int64(len(p)), c.left); n > 0 {
		c.w.Write(p[:n])
		c.left -= n
	}
	if c.left <= 0 && c.note != "" {
		c.w.Write([]byte(c.note))
		c.note = ""
	}
	return len(p), nil
}

// newLogger is the VMM's logger (Main makes it the default, which the
// virtio devices log through): text records to w, rate-limited per
// message (logBurst, logEvery) by the clock now.
func newLogger(w io.Writer, now func() time.Time) *slog.Logger {
	return slog.New(&limitHandler{Handler: slog.NewTextHandler(w, nil),
		l: &limiter{now: now, m: map[string]*bucket{}}})
}

// limitHandler drops the records its limiter refuses and adds
// dropped=<n> to the first one it passes after dropping n.
type limitHandler struct {
	slog.Handler
	l *limiter // shared by the handlers WithAttrs and WithGroup derive
}

var _ slog.Handler = (*limitHandler)(nil)

// Handle implements slog.Handler.Handle.
func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	dropped, ok := h.l.take(r.Message)
	if !ok {
		return nil
	}
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("dropped", dropped))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.WithAttrs.
func (h *limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &limitHandler{Handler: h.Handler.WithAttrs(as), l: h.l}
}

// WithGroup implements slog.Handler.WithGroup.
func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{Handler: h.Handler.WithGroup(name), l: h.l}
}

// limiter is a token bucket per message.
type limiter struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*bucket // guarded by mu
}

type bucket struct {
	tokens  float64
	last    time.Time
	dropped int
}

// take spends a token of msg's bucket: ok if there was one, with the
// number of records of msg dropped since the last one passed.
func (l *limiter) take(msg string) (dropped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.m[msg]
	if b == nil {
		if len(l.m) >= logKeys {
			msg = ""
			b = l.m[msg]
		}
		if b == nil {
			b = &bucket{tokens: logBurst, last: now}
			l.m[msg] = b
		}
	}
	b.tokens = min(logBurst, b.tokens+float64(now.Sub(b.last))/float64(logEvery))
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		return 0, false
	}
	b.tokens--
	dropped, b.dropped = b.dropped, 0
	return dropped, true
}
