package e2b

import (
	"context"
	"errors"
	"io"
	"path"
	"sync"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// Filesystem.WatchDir and the watcher RPCs on the tree's
// sandboxes/<id>/watch (docs/filesystem.md): each watch is one open of
// that file, on a tree connection of its own, whose events are the
// agent's lines (client.Event).

// eventTypes are E2B's EventType names of the watch file's types.
var eventTypes = map[string]string{
	"create": "EVENT_TYPE_CREATE",
	"write":  "EVENT_TYPE_WRITE",
	"remove": "EVENT_TYPE_REMOVE",
	"rename": "EVENT_TYPE_RENAME",
	"chmod":  "EVENT_TYPE_CHMOD",
}

// errEventsLost is how a watch reports an overflow: E2B has no event
// for it, so the watch ends with it rather than lose events silently.
var errEventsLost = connect.NewError(connect.CodeResourceExhausted,
	errors.New("watch: events were lost (more arrived than were read); watch again"))

// openWatch opens a watch of guest directory dir of the call's sandbox
// on a tree connection of its own (closing c ends it).
func (s *Server) openWatch(ctx context.Context, sc *sandboxCall, dir string, recursive bool) (*client.Client, *client.Watch, error) {
	c, err := s.streamTree(ctx, sc.key)
	if err != nil {
		return nil, nil, rpcError(err)
	}
	w, err := c.Watch(sc.rec.ID, dir, recursive)
	if err != nil {
		c.Close()
		return nil, nil, rpcError(err)
	}
	return c, w, nil
}

// fsEvent is the FilesystemEvent of ev under dir, with the entry's
// EntryInfo when entry is set and the file is still there.
func fsEvent(sc *sandboxCall, dir string, ev client.Event, entry bool) *filesystemEvent {
	fe := &filesystemEvent{Name: ev.Name, Type: eventTypes[ev.Type]}
	if entry && ev.Type != "remove" && ev.Type != "rename" {
		if e, err := statEntry(sc, path.Join(dir, ev.Name)); err == nil {
			fe.Entry = &e
		}
	}
	return fe
}

// watchDir is Filesystem.WatchDir: a start event, then each event as it
// comes, keepalives between; it ends when the client goes, its deadline
// passes (Connect-Timeout-Ms), the directory goes (the stream ends), or
// events were lost (resource_exhausted).
func (s *Server) watchDir(ctx context.Context, req *connect.Request[watchDirRequest], st *connect.ServerStream[watchEvent]) error {
	sc := sandboxOfCtx(ctx)
	dir := guestPath(req.Msg.Path, requestUser(req.Header(), ""))
	c, w, err := s.openWatch(ctx, sc, dir, req.Msg.Recursive)
	if err != nil {
		return err
	}
	defer c.Close()
	own := &sandboxCall{rec: sc.rec, key: sc.key, c: c} // entries are read on the watch's connection
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var mu sync.Mutex
	send := func(ev watchEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return st.Send(&ev)
	}
	if err := send(watchEvent{Start: &empty{}}); err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go keepalive(done, req.Header().Get("Keepalive-Ping-Interval"), func(processEvent) error {
		return send(watchEvent{Keepalive: &empty{}})
	})
	for {
		ev, err := w.Next()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return streamErr(ctx, err)
		case ev.Type == "overflow":
			return errEventsLost
		}
		if err := send(watchEvent{Filesystem: fsEvent(own, dir, ev, req.Msg.IncludeEntry)}); err != nil {
			return err
		}
	}
}
