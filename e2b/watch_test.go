package e2b

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// countCloser counts its Close calls.
type countCloser struct{ n *atomic.Int32 }

func (c countCloser) Close() error { c.n.Add(1); return nil }

func TestWatcherCaps(t *testing.T) {
	var closed atomic.Int32
	var ws watchers
	mk := func(sb, owner string, i int) *pollWatcher {
		return &pollWatcher{id: sb + strconv.Itoa(i), sb: sb, owner: owner, c: countCloser{&closed}}
	}
	for i := range maxWatchersPerSandbox {
		if err := ws.add(mk("a", "k1", i)); err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
	}
	if err := ws.add(mk("a", "k1", 99)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("one watcher over the sandbox cap: %v; want resource_exhausted", err)
	}
	for sb := 0; ws.add(mk("s"+strconv.Itoa(sb), "k1", 0)) == nil; sb++ {
		if sb > maxWatchersPerKey {
			t.Fatal("no cap per key")
		}
	}
	if n := ws.byKey["k1"]; n != maxWatchersPerKey {
		t.Errorf("key has %d watchers at its cap; want %d", n, maxWatchersPerKey)
	}
	if ws.get("b", "a0") != nil {
		t.Error("sandbox b found sandbox a's watcher")
	}
	if !ws.remove("a", "a3") || ws.get("a", "a3") != nil || closed.Load() != 1 {
		t.Errorf("remove a3: still there or not closed (%d closes)", closed.Load())
	}
	ws.remove("a", "")
	if len(ws.m["a"]) != 0 || closed.Load() != maxWatchersPerSandbox {
		t.Errorf("after removing all of a: %d left, %d closed", len(ws.m["a"]), closed.Load())
	}
	if err := ws.add(mk("a", "k2", 0)); err != nil {
		t.Errorf("a watcher after the removal: %v", err)
	}
	// At the key's cap, an ended watcher makes room; a live one does not.
	for sb := 0; ws.add(mk("t"+strconv.Itoa(sb), "k1", 0)) == nil; sb++ {
	}
	ws.get("s0", "s00").err = io.EOF
	if err := ws.add(mk("z", "k1", 0)); err != nil {
		t.Errorf("at the cap with an ended watcher: %v; want it purged", err)
	}
	if ws.get("s0", "s00") != nil {
		t.Error("the ended watcher is still there")
	}
	if err := ws.add(mk("z", "k1", 1)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("at the cap with none ended: %v; want resource_exhausted", err)
	}
}

func TestWatcherFetch(t *testing.T) {
	p := &pollWatcher{id: "w"}
	evs, gone, err := p.fetch()
	if err != nil || gone || evs == nil || len(evs) != 0 {
		t.Errorf("empty fetch = %v, %v, %v; want [], false, nil", evs, gone, err)
	}
	p.events = []filesystemEvent{{Name: "a", Type: "EVENT_TYPE_CREATE"}}
	if evs, _, _ := p.fetch(); len(evs) != 1 || len(p.events) != 0 {
		t.Errorf("fetch = %v; want the one event, taken", evs)
	}
	p.events, p.err = []filesystemEvent{{Name: "b"}}, io.EOF
	if evs, gone, err := p.fetch(); len(evs) != 1 || gone || err != nil {
		t.Errorf("fetch after the end with one queued = %v, %v, %v; want it first", evs, gone, err)
	}
	if _, gone, err := p.fetch(); !gone || connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("fetch after the end = %v, %v; want gone, not_found", gone, err)
	}
	p = &pollWatcher{id: "w", err: errEventsLost, events: []filesystemEvent{{Name: "c"}}}
	if _, gone, err := p.fetch(); !gone || !errors.Is(err, errEventsLost) {
		t.Errorf("fetch after a loss = %v, %v; want gone, events lost", gone, err)
	}
}

// TestWatcherPumpStopsAtLoss: once events are lost (an overflow line, or
// the queue full), the pump stops reading and converting (stat-ing) at
// once, closes its connection, and the next fetch fails with the loss;
// the watcher counts as ended, so it makes room at a cap.
func TestWatcherPumpStopsAtLoss(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overflow int // the index of the overflow line, -1 for none
		total    int // events the watch has before its EOF
		reads    int // Next calls wanted
		convs    int // conv calls wanted
	}{
		{"overflow line", 3, 100, 4, 3},
		{"queue full", -1, maxWatcherEvents + 50, maxWatcherEvents + 1, maxWatcherEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed atomic.Int32
			p := &pollWatcher{id: "w", c: countCloser{&closed}}
			reads, convs := 0, 0
			next := func() (client.Event, error) {
				reads++
				switch {
				case reads > tc.total:
					return client.Event{}, io.EOF
				case reads-1 == tc.overflow:
					return client.Event{Type: "overflow"}, nil
				}
				return client.Event{Type: "create", Name: fmt.Sprint(reads)}, nil
			}
			conv := func(ev client.Event) *filesystemEvent {
				convs++
				return &filesystemEvent{Name: ev.Name, Type: eventTypes[ev.Type]}
			}
			p.pump(next, conv)
			if reads != tc.reads || convs != tc.convs {
				t.Errorf("pump read %d events and converted %d; want %d and %d (it stops at the loss)", reads, convs, tc.reads, tc.convs)
			}
			if closed.Load() != 1 {
				t.Errorf("connection closed %d times at the loss; want 1", closed.Load())
			}
			if !p.finished() {
				t.Error("a watcher that lost events is not finished (it would hold its cap slot)")
			}
			if evs, gone, err := p.fetch(); !gone || !errors.Is(err, errEventsLost) || evs != nil {
				t.Errorf("fetch after the loss = %d events, %v, %v; want none, gone, events lost", len(evs), gone, err)
			}
		})
	}
}
