package guest

import (
	"context"
	"syscall"

	"sandfs/ctl/msg"
)

// The queue of a watcher's event lines: bounded (maxWatchQueue lines,
// maxWatchBytes bytes); what does not fit is dropped and the reader is
// told with one "overflow" line where the loss happened, never silently.

// push queues one event line (without its newline), after the overflow
// line of a loss before it; room is always kept for one overflow line,
// which read gives when the queue drains after a loss.
func (w *watcher) push(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	line += "\n"
	lines, n := 1, len(line)
	if w.lost {
		lines, n = 2, n+len("overflow\n")
	}
	if !w.roomLocked(lines+1, n+len("overflow\n")) {
		w.lost = true
		return
	}
	if w.lost {
		w.appendLocked("overflow\n")
		w.lost = false
	}
	w.appendLocked(line)
}

// markLost records that events were lost (a directory that could not be
// watched), to be reported by an overflow line.
func (w *watcher) markLost() {
	w.mu.Lock()
	w.lost = true
	w.notifyLocked()
	w.mu.Unlock()
}

// roomLocked reports whether lines more lines of n bytes fit.
func (w *watcher) roomLocked(lines, n int) bool {
	return len(w.queue)+lines <= maxWatchQueue && w.bytes+n <= maxWatchBytes
}

func (w *watcher) appendLocked(line string) {
	w.queue = append(w.queue, line)
	w.bytes += len(line)
	w.notifyLocked()
}

func (w *watcher) notifyLocked() {
	close(w.change)
	w.change = make(chan struct{})
}

// end marks the watch ended: readers get what is queued, then EOF.
func (w *watcher) end() {
	w.mu.Lock()
	w.ended = true
	w.notifyLocked()
	w.mu.Unlock()
}

// close removes the watch: the descriptor is closed, which ends loop.
func (w *watcher) close() {
	w.end()
	w.f.Close()
}

// read returns whole queued lines that fit in b (the first one cut if b
// is smaller, its rest returned next), blocking until there is one;
// 0 (EOF) once the watch ended and everything was read; EINTR when ctx
// ends first.
func (w *watcher) read(ctx context.Context, b []byte) (int, error) {
	w.mu.Lock()
	for {
		if w.partial == "" && len(w.queue) == 0 && w.lost {
			w.partial, w.lost = "overflow\n", false
		}
		if w.partial != "" || len(w.queue) > 0 {
			n := w.takeLocked(b)
			w.mu.Unlock()
			return n, nil
		}
		if w.ended {
			w.mu.Unlock()
			return 0, nil
		}
		ch := w.change
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, msg.Errorf(syscall.EINTR, "read: connection closed")
		}
		w.mu.Lock()
	}
}

// takeLocked copies the partial line and then whole queued lines into b.
func (w *watcher) takeLocked(b []byte) int {
	n := 0
	if w.partial != "" {
		k := copy(b, w.partial)
		w.partial = w.partial[k:]
		n += k
		if w.partial != "" {
			return n
		}
	}
	for len(w.queue) > 0 {
		line := w.queue[0]
		if n > 0 && len(line) > len(b)-n {
			break
		}
		k := copy(b[n:], line)
		n += k
		w.queue = w.queue[1:]
		w.bytes -= len(line)
		if k < len(line) {
			w.partial = line[k:]
			break
		}
	}
	if len(w.queue) == 0 {
		w.queue = nil
	}
	return n
}
