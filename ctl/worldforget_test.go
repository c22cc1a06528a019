package ctl

import (
	"context"
	"net"
	"sync"
	"testing"

	"sandfs/vmm/virtio/vsock/hybrid"
)

// forgetRuntime starts machines whose agent dials are counted per
// sandbox (the dial reaches no agent: the "forget" fails and is logged).
type forgetRuntime struct {
	mu     sync.Mutex
	dialed map[string]int // sandbox id → agent dials
}

type forgetMachine struct {
	*fakeMachine
	r    *forgetRuntime
	name string
}

func (r *forgetRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	return &forgetMachine{fakeMachine: &fakeMachine{done: make(chan struct{})}, r: r, name: s.ID}, nil
}

func (m *forgetMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	if port == hybrid.AgentPort {
		m.r.mu.Lock()
		m.r.dialed[m.name]++
		m.r.mu.Unlock()
	}
	c, guest := net.Pipe()
	guest.Close()
	return c, nil
}

func (r *forgetRuntime) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.dialed
	r.dialed = map[string]int{}
	return d
}

// TestWorldChangedForget: the guests told to forget their cached world
// are those whose union changed: an apply tells every sandbox over the
// same lower, a discard or a rebase only the world's own; a sandbox on
// another lower or without a world hears nothing.
func TestWorldChangedForget(t *testing.T) {
	r := &forgetRuntime{dialed: map[string]int{}}
	p, _ := openPlane(t, t.TempDir(), r)
	p.SetWorldOpener(worldsOpener(map[string]*fakeWorld{}))
	l1, l2 := t.TempDir(), t.TempDir()
	for _, m := range []string{
		"world a lower=" + l1, "world b lower=" + l1, "world c lower=" + l2,
		"new sa world=a", "new sb world=b", "new sc world=c", "new sn",
	} {
		if _, err := p.Ctl(ctx(t), []byte(m)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	r.take()
	for _, tc := range []struct {
		world, verb string
		want        map[string]int
	}{
		{"a", "apply force", map[string]int{"sa": 1, "sb": 1}},
		{"b", "discard", map[string]int{"sb": 1}},
		{"c", "rebase", map[string]int{"sc": 1}},
	} {
		p.WorldCtl(ctx(t), tc.world, []byte(tc.verb))
		got := r.take()
		if len(got) != len(tc.want) {
			t.Errorf("%s %s: agents dialed %v; want %v", tc.world, tc.verb, got, tc.want)
			continue
		}
		for k, n := range tc.want {
			if got[k] != n {
				t.Errorf("%s %s: agents dialed %v; want %v", tc.world, tc.verb, got, tc.want)
			}
		}
	}
}
