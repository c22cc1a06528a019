package ctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	froms  []SnapshotRef // every Restore, in order
	// failRestore: the Restore whose number (from 1) it holds fails.
	failRestore int
	reaped      []string // ids, by Reap (reattachRuntime)
	ids         IDRange  // IDs: none (Count 0) unless a test sets it
}

// IDs implements IDRanger.
func (r *fakeRuntime) IDs() IDRange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids
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

// Restore implements SnapshotRestorer: a new machine that remembers the
// snapshot's marker file (fakeMachine.Snapshot).
func (r *fakeRuntime) Restore(ctx context.Context, s Spec, from SnapshotRef) (Machine, error) {
	b, err := os.ReadFile(filepath.Join(from.Dir, "marker"))
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.froms = append(r.froms, from)
	fail := r.fail
	if len(r.froms) == r.failRestore {
		fail = errors.New("restore number " + fmt.Sprint(r.failRestore) + " fails")
	}
	r.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	m := &fakeMachine{done: make(chan struct{}), marker: string(b), last: from.ID}
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

// Reap implements Reaper: a machine still live for the directory's id
// (its base name) is stopped; every call is recorded.
func (r reattachRuntime) Reap(dir string) error {
	id := filepath.Base(dir)
	r.mu.Lock()
	r.reaped = append(r.reaped, id)
	m := r.live[id]
	r.mu.Unlock()
	if m != nil {
		m.Stop(context.Background())
	}
	return nil
}

// reapedIDs returns the ids Reap was called for, in order.
func (r *fakeRuntime) reapedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reaped)
}

// run makes a live machine for id, as a VMM left running by a daemon
// that died would be.
func (r *fakeRuntime) run(id string) *fakeMachine {
	m := &fakeMachine{done: make(chan struct{})}
	r.mu.Lock()
	r.live[id] = m
	r.mu.Unlock()
	return m
}

// fakeMachine is the test double for Machine.
type fakeMachine struct {
	mu       sync.Mutex
	done     chan struct{}
	err      error // why it ended
	paused   bool
	failNext error  // the next Pause/Resume/Stop fails with this
	marker   string // what its snapshots hold (set by tests, or a restore's)
	last     string // the snapshot it last took or was restored from
	snapFail error  // Snapshot fails with this
	snapped  []bool // for each Snapshot: was it paused
	base     string // a template snapshot's directory: the first snapshot is a delta over it
	console  string // what LastWords says its guest printed last
	dumps    int    // AskDump calls
}

// AskDump implements dumper: counted.
func (m *fakeMachine) AskDump() {
	m.mu.Lock()
	m.dumps++
	m.mu.Unlock()
}

// LastWords implements the daemon's optional last-words log of a machine
// that ended unasked.
func (m *fakeMachine) LastWords() []any { return []any{"console", m.console} }

// Snapshot implements Snapshotter: a file "marker" holding m.marker; a
// delta when parent is the machine's last snapshot.
func (m *fakeMachine) Snapshot(ctx context.Context, dir, parent string) (SnapshotStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snapped = append(m.snapped, m.paused)
	if m.snapFail != nil {
		return SnapshotStats{}, m.snapFail
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte(m.marker), 0o600); err != nil {
		return SnapshotStats{}, err
	}
	st := SnapshotStats{DataBytes: 4096, DiskBytes: 8192, Boot: "fake"}
	switch {
	case parent != "" && parent == m.last:
		st.Parent = parent
	case m.base != "" && m.last == "":
		st.Parent, st.Base = filepath.Base(m.base), m.base
	}
	m.last = filepath.Base(dir)
	return st, nil
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
var _ Snapshotter = (*fakeMachine)(nil)
var _ SnapshotRestorer = (*fakeRuntime)(nil)
var _ Reaper = reattachRuntime{}
var _ = syscall.EIO
