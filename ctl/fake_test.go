package ctl

import (
	"context"
	"errors"
	"sync"
	"syscall"
)

// fakeRuntime is the test double for Runtime: machines are channels.
type fakeRuntime struct {
	mu     sync.Mutex
	specs  []Spec                  // every Start, in order
	fail   error                   // Start returns this if set
	gate   chan struct{}           // if set, Start waits for it (or ctx)
	live   map[string]*fakeMachine // by id
	paused map[string]bool
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{live: map[string]*fakeMachine{}}
}

func (r *fakeRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	fail, gate := r.fail, r.gate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	m := &fakeMachine{done: make(chan struct{})}
	r.mu.Lock()
	r.live[s.ID] = m
	r.mu.Unlock()
	return m, nil
}

func (r *fakeRuntime) machine(id string) *fakeMachine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[id]
}

func (r *fakeRuntime) lastSpec() Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[len(r.specs)-1]
}

// reattachRuntime also implements Reattacher: it finds machines that are
// still live in the fake runtime it wraps.
type reattachRuntime struct{ *fakeRuntime }

func (r reattachRuntime) Reattach(ctx context.Context, s Spec) (Machine, error) {
	if m := r.machine(s.ID); m != nil && !m.ended() {
		return m, nil
	}
	return nil, errors.New("no such machine")
}

// fakeMachine is the test double for Machine.
type fakeMachine struct {
	mu       sync.Mutex
	done     chan struct{}
	err      error // why it ended
	paused   bool
	failNext error // the next Pause/Resume/Stop fails with this
}

func (m *fakeMachine) op(f func()) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return err
	}
	select {
	case <-m.done:
		return errors.New("machine ended")
	default:
	}
	f()
	return nil
}

func (m *fakeMachine) Pause(ctx context.Context) error  { return m.op(func() { m.paused = true }) }
func (m *fakeMachine) Resume(ctx context.Context) error { return m.op(func() { m.paused = false }) }
func (m *fakeMachine) Stop(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return err
	}
	m.endLocked(nil)
	return nil
}
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}
func (m *fakeMachine) Pid() int { return 4242 }

// crash ends the machine with err, as a VMM dying would.
func (m *fakeMachine) crash(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endLocked(err)
}

func (m *fakeMachine) endLocked(err error) {
	select {
	case <-m.done:
	default:
		m.err = err
		close(m.done)
	}
}

func (m *fakeMachine) ended() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *fakeMachine) isPaused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

var _ Pider = (*fakeMachine)(nil)
var _ Reattacher = reattachRuntime{}
var _ = syscall.EIO
