package netpolicy

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Spares keeps filters loaded ahead of need, so that a new sandbox's
// network does not wait for Load: in one lab run a Load took 60-160 ms
// of a new sandbox's 88-260 ms of network set-up (on this host 5 ms:
// maps 2 ms, the kernel's verifier the rest; docs/network.md). Take hands a spare out and loads its
// replacement in the background on a thread of the lowest CPU priority
// (nice 19), so that it does not slow the sandbox being made meanwhile;
// with no spare ready, Take loads one itself. A spare is a fresh Load,
// untouched until taken: empty maps, generation 0, deny.
type Spares struct {
	want int

	mu      sync.Mutex
	ready   []*Filter
	loading int  // background loads under way
	closed  bool // Close called: loads that finish are closed
	taken   int  // spares handed out (Stats)
}

// NewSpares keeps n spares (at least one). The first is loaded now, at
// the caller's priority (a host that cannot load a filter fails here,
// and the library's one-time probes of the kernel are made before any
// background load could hold them up), the rest in the background.
func NewSpares(n int) (*Spares, error) {
	n = max(n, 1)
	f, err := Load()
	if err != nil {
		return nil, err
	}
	s := &Spares{want: n, ready: []*Filter{f}}
	s.mu.Lock()
	s.fill()
	s.mu.Unlock()
	return s, nil
}

// Take returns a spare, or a filter it loads now if none is ready, and
// starts loading a replacement.
func (s *Spares) Take() (*Filter, error) {
	s.mu.Lock()
	var f *Filter
	if k := len(s.ready); k > 0 {
		f, s.ready = s.ready[k-1], s.ready[:k-1]
		s.taken++
	}
	s.fill()
	s.mu.Unlock()
	if f != nil {
		return f, nil
	}
	return Load()
}

// Stats returns how many spares are ready and how many were taken.
func (s *Spares) Stats() (ready, taken int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ready), s.taken
}

// Close frees the spares; loads under way free theirs when done.
func (s *Spares) Close() error {
	s.mu.Lock()
	ready := s.ready
	s.ready, s.closed = nil, true
	s.mu.Unlock()
	var err error
	for _, f := range ready {
		if e := f.Close(); err == nil {
			err = e
		}
	}
	return err
}

// fill starts the loads that bring the spares back to want. mu held.
func (s *Spares) fill() {
	for !s.closed && len(s.ready)+s.loading < s.want {
		s.loading++
		go s.loadOne()
	}
}

// loadOne loads a spare on a thread of its own at nice 19. A failed load
// is not retried here: the next Take starts another.
func (s *Spares) loadOne() {
	// Never unlocked: the thread, niced, ends with this goroutine
	// rather than run other goroutines at the lowest priority.
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
	f, err := Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loading--
	switch {
	case err != nil:
	case s.closed:
		f.Close()
	default:
		s.ready = append(s.ready, f)
	}
}
