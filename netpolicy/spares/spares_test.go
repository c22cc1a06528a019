package spares

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// maker makes numbered things and records which were freed; fail makes
// the next make fail, the next hold makes wait for gate to close.
type maker struct {
	mu    sync.Mutex
	n     int
	freed []int
	fail  bool
	hold  int
	held  int // makes waiting for gate
	gate  chan struct{}
	slow  time.Duration // each free takes this long
}

func (m *maker) make() (int, error) {
	m.mu.Lock()
	var gate chan struct{}
	if m.hold > 0 {
		m.hold--
		m.held++
		gate = m.gate
	}
	fail := m.fail
	m.fail = false
	m.n++
	n := m.n
	m.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if fail {
		return 0, errors.New("no")
	}
	return n, nil
}

func (m *maker) free(x int) {
	m.mu.Lock()
	slow := m.slow
	m.mu.Unlock()
	time.Sleep(slow)
	m.mu.Lock()
	m.freed = append(m.freed, x)
	m.mu.Unlock()
}

func waitStats(t *testing.T, p *Pool[int], ready, making int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r, m, _ := p.Stats()
		if r == ready && m == making {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ready, %d being made; want %d, %d", r, m, ready, making)
		}
	}
}

// TestPool: the first spare is made at New, the rest in the background;
// each Take is replaced; a Take with none ready makes its own (not
// counted as a spare taken); Close frees the ready ones and those made
// after it, each counted as being made until it is freed (a caller that
// waits for no make under way finds them all freed), and a failed make
// is not kept.
func TestPool(t *testing.T) {
	m := &maker{}
	p, err := New(2, true, m.make, m.free)
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, p, 2, 0)
	m.mu.Lock()
	m.gate, m.hold = make(chan struct{}), 2 // the two replacements wait
	m.mu.Unlock()
	a, _ := p.Take()
	b, _ := p.Take()
	waitStats(t, p, 0, 2)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		held := m.held
		m.mu.Unlock()
		if held == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replacements under way; want 2", held)
		}
	}
	c, err := p.Take() // none ready: its own, made here
	if err != nil || a == b || c == a || c == b {
		t.Fatalf("taken %d %d %d (%v); want three different", a, b, c, err)
	}
	if _, _, taken := p.Stats(); taken != 2 {
		t.Errorf("taken %d; want 2", taken)
	}
	m.mu.Lock()
	m.slow = 50 * time.Millisecond // a make is under way until its spare is freed
	m.mu.Unlock()
	p.Close()
	close(m.gate)
	waitStats(t, p, 0, 0)
	m.mu.Lock()
	freed := len(m.freed)
	m.mu.Unlock()
	if freed != 2 {
		t.Errorf("%d freed after Close; want 2 (the replacements, made after it)", freed)
	}

	m2 := &maker{}
	q, _ := New(1, false, m2.make, m2.free)
	m2.mu.Lock()
	m2.fail = true
	m2.mu.Unlock()
	q.Take() // its replacement fails
	waitStats(t, q, 0, 0)
	if x, err := q.Take(); err != nil || x == 0 {
		t.Errorf("Take after a failed make: %d, %v; want one made then", x, err)
	}
	q.Close()
}
