package virtio

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DebugEnv names the environment variable that, when set (to anything
// but "" or "0") in a VMM process, makes SIGUSR1 dump the state of every
// virtio transport (registers, interrupt status, each queue's ring
// indices and event fields, and device-specific state) to stderr, which
// for `sandfs vmm` is vmm.log:
//
//	SANDFS_VIRTIO_DEBUG=1 sandfs serve ...; kill -USR1 <vmm pid>
//
// The handler is installed at program start, before the VMM's seccomp
// filter; the dump reads ring state without the device goroutines'
// cooperation, so it is a snapshot that may be slightly torn.
const DebugEnv = "SANDFS_VIRTIO_DEBUG"

// DebugStater is implemented by devices that add their own state to the
// SIGUSR1 dump.
type DebugStater interface {
	DebugState() string
}

// dumpLockWait is how long a dump waits for a device's lock.
const dumpLockWait = 100 * time.Millisecond

// LockForDump takes mu for a DebugState, waiting up to dumpLockWait: a
// device busy for a moment (a connection's work under way) is still
// dumped, one stuck holding its lock is not waited on (false: not
// taken). A bare TryLock lost a busy device's state to the moment.
func LockForDump(mu *sync.Mutex) bool {
	deadline := time.Now().Add(dumpLockWait)
	for !mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

var debugReg struct {
	sync.Mutex
	on       bool
	ts       []*Transport
	sections []*func() string
}

// DebugOn reports whether DebugEnv was set: SIGUSR1 dumps.
func DebugOn() bool { return debugReg.on }

// AddDebugSection adds f's text to every dump after the transports (the
// VMM adds its interrupt controllers) until remove is called; remove
// waits for a dump in progress.
func AddDebugSection(f func() string) (remove func()) {
	if !debugReg.on {
		return func() {}
	}
	p := &f
	debugReg.Lock()
	debugReg.sections = append(debugReg.sections, p)
	debugReg.Unlock()
	return func() {
		debugReg.Lock()
		defer debugReg.Unlock()
		debugReg.sections = slices.DeleteFunc(debugReg.sections, func(q *func() string) bool { return q == p })
	}
}

func init() {
	if v := os.Getenv(DebugEnv); v == "" || v == "0" {
		return
	}
	debugReg.on = true
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for range ch {
			os.Stderr.WriteString(DebugDump())
		}
	}()
}

func debugRegister(t *Transport) {
	if !debugReg.on {
		return
	}
	debugReg.Lock()
	debugReg.ts = append(debugReg.ts, t)
	debugReg.Unlock()
}

// debugUnregister takes t out of the dump; Transport.Close calls it, so
// that no dump reads the rings of a closed device (guest RAM may be
// unmapped next), and it waits for a dump in progress.
func debugUnregister(t *Transport) {
	if !debugReg.on {
		return
	}
	debugReg.Lock()
	defer debugReg.Unlock()
	for i, r := range debugReg.ts {
		if r == t {
			debugReg.ts = append(debugReg.ts[:i], debugReg.ts[i+1:]...)
			return
		}
	}
}

// DebugDump describes every transport registered while DebugEnv was set
// and not closed. It holds the registry while it reads their rings.
func DebugDump() string {
	debugReg.Lock()
	defer debugReg.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "virtio debug dump: %d transports\n", len(debugReg.ts))
	for _, t := range debugReg.ts {
		b.WriteString(t.DebugState())
	}
	for _, f := range debugReg.sections {
		b.WriteString((*f)())
	}
	return b.String()
}

// DebugState describes the transport and its queues (racy snapshot).
func (t *Transport) DebugState() string {
	var b strings.Builder
	t.mu.Lock()
	status := t.status
	t.mu.Unlock()
	fmt.Fprintf(&b, "virtio id=%d line=%d status=%#x live=%v needsReset=%v paused=%v intStatus=%#x features=%#x pulses=%d acks=%d repeats=%d\n",
		t.dev.ID(), t.line, status, t.live.Load(), t.needsReset.Load(), t.paused.Load(), t.intStatus.Load(), t.features.Load(), t.pulses.Load(), t.acks.Load(), t.repeats())
	for i, q := range t.queues {
		fmt.Fprintf(&b, "  queue %d: %s\n", i, q.debugState())
	}
	if d, ok := t.dev.(DebugStater); ok {
		b.WriteString(d.DebugState())
	}
	return b.String()
}

func (q *Queue) debugState() string {
	if !q.Live() {
		return fmt.Sprintf("size=%d ready=%v not live", q.Size, q.Ready)
	}
	n := int(q.Size)
	s := fmt.Sprintf("size=%d nextAvail=%d nextUsed=%d lastSignal=%d pushedSince=%v avail.flags=%#x avail.idx=%d used.idx=%d",
		q.Size, q.NextAvail, q.NextUsed, q.lastSignal, q.pushedSince, load16(q.avail, 0), load16(q.avail, 2), load16(q.used, 2))
	if q.eventIdx {
		s += fmt.Sprintf(" used_event=%d avail_event=%d", load16(q.avail, 4+2*n), load16(q.used, 4+8*n))
	}
	return s
}
