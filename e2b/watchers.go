package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// The polling watcher RPCs (CreateWatcher, GetWatcherEvents,
// RemoveWatcher; the Python SDK's watch_dir): a watcher is a watch file
// kept open between requests, read by a goroutine into a bounded queue
// that GetWatcherEvents empties. Watchers are bounded per sandbox and per
// key (each is a tree connection in the daemon and a watch in the
// guest); one goes with RemoveWatcher, with its sandbox's kill, or when
// a request finds its sandbox ended.
const (
	maxWatchersPerSandbox = 16
	maxWatchersPerKey     = 64
	maxWatcherEvents      = 4096 // events held between two GetWatcherEvents
)

// pollWatcher is one watcher.
type pollWatcher struct {
	id, sb, owner string
	c             io.Closer // its own connection: closing it ends the watch

	mu     sync.Mutex        // guards the fields below
	events []filesystemEvent // not yet fetched, at most maxWatcherEvents
	// err is why reading ended: io.EOF (the directory went),
	// errEventsLost (the next fetch fails with it), or the read's error.
	err error
}

// pump reads events from next into the queue, each made a
// FilesystemEvent by conv (which may stat the entry), until the watch
// ends or an event is lost (an overflow line, or the queue full): then
// it keeps why for the next fetch, closes the connection and stops, so a
// watcher no one polls costs no more reads or stats.
func (p *pollWatcher) pump(next func() (client.Event, error), conv func(client.Event) *filesystemEvent) {
	defer p.c.Close() // the record stays for its last fetch; the connection need not
	for {
		ev, err := next()
		if err == nil && (ev.Type == "overflow" || p.full()) {
			err = errEventsLost
		}
		if err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
		fe := conv(ev)
		p.mu.Lock() // only pump appends: the queue is still short of full
		p.events = append(p.events, *fe)
		p.mu.Unlock()
	}
}

// full reports whether the queue holds maxWatcherEvents.
func (p *pollWatcher) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events) >= maxWatcherEvents
}

// finished reports whether the watch has ended (its events may still
// wait for a fetch).
func (p *pollWatcher) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

// fetch takes the queued events. Lost events fail the fetch
// (resource_exhausted); a watch that ended with nothing queued is
// not_found, as a removed watcher is. gone reports that the watcher is
// finished.
func (p *pollWatcher) fetch() (evs []filesystemEvent, gone bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs, p.events = p.events, nil
	switch {
	case errors.Is(p.err, errEventsLost):
		return nil, true, errEventsLost
	case p.err != nil && len(evs) == 0:
		if errors.Is(p.err, io.EOF) {
			return nil, true, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %s: the directory is gone", p.id))
		}
		return nil, true, rpcError(p.err)
	}
	if evs == nil {
		evs = []filesystemEvent{}
	}
	return evs, false, nil
}

// watchers are every sandbox's polling watchers.
type watchers struct {
	mu    sync.Mutex                         // guards m and byKey
	m     map[string]map[string]*pollWatcher // sandbox id → watcher id →
	byKey map[string]int                     // keyID → its watchers, all sandboxes
}

// add records p unless a cap is reached (resource_exhausted). At a cap,
// watchers that have ended (their sandbox or directory gone, or events
// lost) and were not fetched since make room first.
func (t *watchers) add(p *pollWatcher) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m, t.byKey = map[string]map[string]*pollWatcher{}, map[string]int{}
	}
	if len(t.m[p.sb]) >= maxWatchersPerSandbox || t.byKey[p.owner] >= maxWatchersPerKey {
		for sb, ws := range t.m {
			for _, q := range ws {
				if (sb == p.sb || q.owner == p.owner) && q.finished() {
					t.removeLocked(q)
				}
			}
		}
	}
	if len(t.m[p.sb]) >= maxWatchersPerSandbox {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watchers: sandbox %q has %d, the most allowed; remove one", p.sb, maxWatchersPerSandbox))
	}
	if t.byKey[p.owner] >= maxWatchersPerKey {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watchers: the API key has %d, the most allowed; remove one", maxWatchersPerKey))
	}
	if t.m[p.sb] == nil {
		t.m[p.sb] = map[string]*pollWatcher{}
	}
	t.m[p.sb][p.id] = p
	t.byKey[p.owner]++
	return nil
}

// get returns watcher id of sandbox sb, or nil.
func (t *watchers) get(sb, id string) *pollWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[sb][id]
}

// remove forgets the watchers of sandbox sb whose id is id ("" for all)
// and closes their connections; it reports whether one was there.
func (t *watchers) remove(sb, id string) bool {
	t.mu.Lock()
	var gone []*pollWatcher
	for wid, p := range t.m[sb] {
		if id == "" || wid == id {
			gone = append(gone, p)
			t.removeLocked(p)
		}
	}
	t.mu.Unlock()
	for _, p := range gone {
		p.c.Close()
	}
	return len(gone) > 0
}

func (t *watchers) removeLocked(p *pollWatcher) {
	delete(t.m[p.sb], p.id)
	if len(t.m[p.sb]) == 0 {
		delete(t.m, p.sb)
	}
	if t.byKey[p.owner]--; t.byKey[p.owner] <= 0 {
		delete(t.byKey, p.owner)
	}
}

func newWatcherID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) createWatcher(ctx context.Context, req *connect.Request[watchDirRequest]) (*connect.Response[createWatcherResponse], error) {
	sc := sandboxOfCtx(ctx)
	dir := guestPath(req.Msg.Path, requestUser(req.Header(), ""))
	// The watcher outlives the request: its connection is not the request's.
	c, w, err := s.openWatch(context.WithoutCancel(ctx), sc, dir, req.Msg.Recursive)
	if err != nil {
		return nil, err
	}
	p := &pollWatcher{id: newWatcherID(), sb: sc.rec.ID, owner: sc.rec.Owner, c: c}
	if err := s.watchers.add(p); err != nil {
		c.Close()
		return nil, err
	}
	own := &sandboxCall{rec: sc.rec, key: sc.key, c: c} // entries are read on the watch's connection
	go p.pump(w.Next, func(ev client.Event) *filesystemEvent { return fsEvent(own, dir, ev, req.Msg.IncludeEntry) })
	return connect.NewResponse(&createWatcherResponse{WatcherID: p.id}), nil
}

func (s *Server) getWatcherEvents(ctx context.Context, req *connect.Request[watcherRequest]) (*connect.Response[watcherEventsResponse], error) {
	sc := sandboxOfCtx(ctx)
	p := s.watchers.get(sc.rec.ID, req.Msg.WatcherID)
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.WatcherID))
	}
	evs, gone, err := p.fetch()
	if gone {
		s.watchers.remove(sc.rec.ID, p.id)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&watcherEventsResponse{Events: evs}), nil
}

func (s *Server) removeWatcher(ctx context.Context, req *connect.Request[watcherRequest]) (*connect.Response[empty], error) {
	sc := sandboxOfCtx(ctx)
	if req.Msg.WatcherID == "" || !s.watchers.remove(sc.rec.ID, req.Msg.WatcherID) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.WatcherID))
	}
	return connect.NewResponse(&empty{}), nil
}
