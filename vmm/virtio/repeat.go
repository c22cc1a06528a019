package virtio

import (
	"log/slog"
	"sync"
	"time"
)

// An interrupt the driver has not acknowledged within repeatAfter is
// signalled again, as a level-triggered line would stay asserted until
// the driver acks it: the edges the transport sends are otherwise lost
// for good if one does not reach the driver (with EVENT_IDX no later used
// buffer signals again: used_event moves only when the driver runs). An
// extra edge costs a driver that did get the first one a look at
// InterruptStatus (virtio_mmio's handler reads and acks it first), which
// the virtio spec allows. A paused transport is not signalled; its
// interrupt is looked at again after the next period.
const repeatAfter = time.Second

// repeater is a transport's watch over its unacknowledged interrupt.
type repeater struct {
	mu     sync.Mutex
	timer  *time.Timer // armed while an interrupt may be unacknowledged
	acks   uint64      // Transport.acks when timer was armed
	warned bool        // the first repeat is logged as a warning
	count  uint64      // edges sent again (for the debug dump)
}

// armRepeat starts the watch after an edge, unless it runs already.
func (t *Transport) armRepeat() {
	r := &t.repeat
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer == nil && !t.closing.Load() {
		r.acks = t.acks.Load()
		r.timer = time.AfterFunc(repeatAfter, t.repeatCheck)
	}
}

// repeatCheck runs repeatAfter after the watch was armed: it sends the
// edge again when InterruptStatus is still set and the driver acked
// nothing since, and goes on watching while bits are set. It holds the
// watch's lock throughout, so that Close (stopRepeat) waits for an edge
// in progress and none follows it.
func (t *Transport) repeatCheck() {
	r := &t.repeat
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if t.closing.Load() || t.intStatus.Load() == 0 {
		return
	}
	if acks := t.acks.Load(); acks == r.acks && !t.paused.Load() {
		r.count++
		if !r.warned {
			r.warned = true
			slog.Warn("virtio: the driver has not acknowledged an interrupt; signalling it again each second",
				"id", t.dev.ID(), "line", t.line, "intStatus", t.intStatus.Load(), "after", repeatAfter)
		}
		t.edge()
	}
	r.acks = t.acks.Load()
	r.timer = time.AfterFunc(repeatAfter, t.repeatCheck)
}

// stopRepeat ends the watch; closing must be set first.
func (t *Transport) stopRepeat() {
	r := &t.repeat
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// repeats is how many edges were sent again.
func (t *Transport) repeats() uint64 {
	t.repeat.mu.Lock()
	defer t.repeat.mu.Unlock()
	return t.repeat.count
}
