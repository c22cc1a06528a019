// Package spares keeps things that are slow to make, and of which a new
// sandbox needs one, made ahead of need: egress filters (the kernel's
// verifier) and whole sandbox networks (a namespace, its tap, filter,
// veth and NAT tables). Take hands a spare out and makes its
// replacement in the background, if asked on a thread of the lowest CPU
// priority (nice 19), so that it does not slow the sandbox being made
// meanwhile; with no spare ready, Take makes one itself. A spare is
// untouched until taken.
package spares

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Pool keeps spares of T.
type Pool[T any] struct {
	want int
	nice bool
	make func() (T, error)
	free func(T)

	mu     sync.Mutex
	ready  []T
	making int  // background makes under way
	closed bool // Close called: makes that finish are freed
	taken  int  // spares handed out (Stats)
}

// New keeps n spares (at least one) made by mk; free frees a spare
// nobody took. The first is made now, at the caller's priority (a host
// that cannot make one fails here), the rest in the background, at nice
// 19 if nice. Not nice if mk takes a lock that sandboxes being made
// wait for: at nice 19 on a busy host it would hold it for seconds.
func New[T any](n int, nice bool, mk func() (T, error), free func(T)) (*Pool[T], error) {
	n = max(n, 1)
	x, err := mk()
	if err != nil {
		return nil, err
	}
	p := &Pool[T]{want: n, nice: nice, make: mk, free: free, ready: []T{x}}
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	return p, nil
}

// Take returns a spare, or one it makes now if none is ready, and
// starts making a replacement.
func (p *Pool[T]) Take() (T, error) {
	p.mu.Lock()
	var x T
	k := len(p.ready)
	if k > 0 {
		x, p.ready = p.ready[k-1], p.ready[:k-1]
		p.taken++
	}
	p.fill()
	p.mu.Unlock()
	if k > 0 {
		return x, nil
	}
	return p.make()
}

// Stats returns how many spares are ready, how many are being made (a
// make that finishes after Close counts until its spare is freed) and
// how many were taken.
func (p *Pool[T]) Stats() (ready, making, taken int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready), p.making, p.taken
}

// Close frees the spares; makes under way free theirs when done.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	for _, x := range ready {
		p.free(x)
	}
}

// fill starts the makes that bring the spares back to want. mu held.
func (p *Pool[T]) fill() {
	for !p.closed && len(p.ready)+p.making < p.want {
		p.making++
		go p.makeOne()
	}
}

// makeOne makes a spare, if nice on a thread of its own at nice 19. A
// failure is not retried here: the next Take starts another.
func (p *Pool[T]) makeOne() {
	if p.nice {
		// Never unlocked: the thread, niced, ends with this goroutine
		// rather than run other goroutines at the lowest priority.
		runtime.LockOSThread()
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
	}
	x, err := p.make()
	p.mu.Lock()
	keep := err == nil && !p.closed
	if keep {
		p.ready = append(p.ready, x)
	}
	if err != nil || keep {
		p.making--
	}
	p.mu.Unlock()
	if err == nil && !keep {
		p.free(x)
		p.mu.Lock()
		p.making-- // only now: whoever waits for no make under way after Close finds it freed
		p.mu.Unlock()
	}
}
