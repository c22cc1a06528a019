package guest

import (
	"sort"
	"sync"
	"time"
)

// DefaultRetention is how long a finished process's record (status and
// unread output) is kept after it ends and its last open file is closed.
const DefaultRetention = 5 * time.Minute

// procTable holds every process record of the agent.
type procTable struct {
	etc       string        // root of /etc for user lookups ("/" in the guest)
	retention time.Duration // see DefaultRetention

	mu    sync.Mutex // guards next and procs; never held with a proc.mu
	next  int        // the next slot number (numbers are never reused)
	procs map[int]*proc
}

func newProcTable(etc string, retention time.Duration) *procTable {
	return &procTable{etc: etc, retention: retention, next: 1, procs: map[int]*proc{}}
}

// alloc makes a new slot in state new with one open handle (the clone
// handle that asked for it).
func (t *procTable) alloc() *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := newProc(t.next, t)
	p.opens = 1
	t.procs[p.n] = p
	t.next++
	return p
}

func (t *procTable) get(n int) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[n]
}

// list returns the live slot numbers in order.
func (t *procTable) list() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns := make([]int, 0, len(t.procs))
	for n := range t.procs {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// open and close count open handles on a slot's files.
func (p *proc) open() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freed {
		return false
	}
	p.opens++
	return true
}

func (p *proc) close() {
	p.mu.Lock()
	p.opens--
	p.mu.Unlock()
	p.tab.maybeFree(p)
}

// maybeFree frees p if nothing can still want it: no open handles, and
// either it never ran (state new or failed) or it ended more than the
// retention ago.
func (t *procTable) maybeFree(p *proc) {
	p.mu.Lock()
	free := !p.freed && p.opens == 0 &&
		(p.state == stNew || p.state == stFailed ||
			p.state.done() && time.Since(p.ended) >= t.retention)
	if free {
		p.freeLocked()
	}
	p.mu.Unlock()
	if free {
		t.remove(p)
	}
}

// scheduleFree arranges for maybeFree to run when the retention is over.
func (t *procTable) scheduleFree(p *proc) {
	time.AfterFunc(t.retention, func() { t.maybeFree(p) })
}

func (t *procTable) remove(p *proc) {
	t.mu.Lock()
	delete(t.procs, p.n)
	t.mu.Unlock()
}

// freeLocked marks p freed, drops its buffered output and wakes every
// blocked reader (they see EOF). Requires p.mu.
func (p *proc) freeLocked() {
	p.freed = true
	p.out.buf, p.errs.buf = nil, nil
	p.notifyLocked()
}
