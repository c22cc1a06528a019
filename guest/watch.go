package guest

import (
	"context"
	iofs "io/fs"
	"path"
	"sync"
	"syscall"

	"sandfs/ctl/msg"
	sfs "sandfs/fs"
)

// Caps of the watch file, since its clients and the guest are hostile to
// each other's resources: each open watch costs the agent an inotify
// descriptor and a goroutine, and the host a session.
const (
	maxWatches    = 64      // open watches per agent (per sandbox)
	maxWatchDirs  = 4096    // directories one recursive watch follows
	maxWatchQueue = 4096    // events held unread per watch
	maxWatchBytes = 1 << 20 // bytes of events held unread per watch
)

// watchRules are the watch file's message rules: a path may hold any
// byte but NUL (Script), up to PATH_MAX and the verb.
var watchRules = msg.Rules{Max: 8 << 10, Script: true}

// watchVerbs is the grammar of the watch file (one message per open).
var watchVerbs = msg.Table[func(h *watchHandle, a []string) error, msg.Stateless]{
	{Name: "watch", Usage: "watch PATH [recursive]", Min: 1, Max: 2,
		Doc: "watch directory PATH (absolute, in the guest) with inotify(7); with recursive, its subdirectories too, including those made later. No symbolic link in PATH is followed (ELOOP, or ENOTDIR for the last name).",
		Run: func(h *watchHandle, a []string) error {
			rec := len(a) == 2
			if rec && a[1] != "recursive" {
				return msg.Errorf(syscall.EINVAL, "watch: want 'recursive', got %s", msg.Cite(a[1]))
			}
			if !path.IsAbs(a[0]) {
				return msg.Errorf(syscall.EINVAL, "watch: path %s is not absolute", msg.Cite(a[0]))
			}
			return h.start(path.Clean(a[0]), rec)
		}},
}

// watchFile serves the agent's watch: each open is one watch. Write one
// message, `watch PATH [recursive]`; then reads block until events come
// and return them, one line each (see watcher.line):
//
//	create a.txt
//	write a.txt
//	rename 'old name'
//	create sub/b.txt
//	overflow
//
// A read ends (EOF) once the watched directory itself is gone. Closing
// the file (the clunk of its fid, or its connection ending) removes the
// watch.
type watchFile struct {
	s    *Server
	mode iofs.FileMode
}

var _ sfs.Opener = (*watchFile)(nil)

// Stat implements sfs.Node.Stat.
func (f *watchFile) Stat(context.Context) (sfs.Attr, error) { return synthAttr(f.mode), nil }

// Open implements sfs.Opener: a new handle, watching nothing yet.
func (f *watchFile) Open(context.Context, sfs.OpenFlags) (sfs.Handle, error) {
	return &watchHandle{s: f.s}, nil
}

// watchHandle is one open watch file.
type watchHandle struct {
	s *Server

	mu sync.Mutex // guards w, closed
	w  *watcher   // nil until the watch message
	// closed is set by Close, so a late watch message starts nothing.
	closed bool
}

var _ sfs.Handle = (*watchHandle)(nil)

// Write implements sfs.Handle.Write: one watch message. A failure's text
// goes to the agent's err file, as a failed ctl write's does.
func (h *watchHandle) Write(_ context.Context, m []byte, _ int64) (int, error) {
	c, err := watchVerbs.Parse(watchRules, m)
	if err == nil {
		err = c.Verb.Run(h, c.Args)
	}
	if err != nil {
		h.s.mu.Lock()
		h.s.errText = err.Error()
		h.s.mu.Unlock()
		return 0, err
	}
	return len(m), nil
}

// start begins watching dir (absolute, below the agent's fs/ root).
func (h *watchHandle) start(dir string, recursive bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w != nil || h.closed {
		return msg.Errorf(syscall.EBUSY, "watch: this open already watches; open the file again for another")
	}
	if h.s.fs.err != nil {
		return msg.Errorf(syscall.EIO, "watch: no file system: %v", h.s.fs.err)
	}
	if h.s.watches.Add(1) > maxWatches {
		h.s.watches.Add(-1)
		return msg.Errorf(syscall.EMFILE, "watch: at most %d watches per sandbox", maxWatches)
	}
	w, err := newWatcher(h.s.fs, dir, recursive)
	if err != nil {
		h.s.watches.Add(-1)
		return err
	}
	h.w = w
	return nil
}

// Read implements sfs.Handle.Read: events as they come (the offset is
// ignored: a stream); EINVAL before the watch message.
func (h *watchHandle) Read(ctx context.Context, b []byte, _ int64) (int, error) {
	h.mu.Lock()
	w := h.w
	h.mu.Unlock()
	if w == nil {
		return 0, msg.Errorf(syscall.EINVAL, "watch: nothing watched; write 'watch PATH' first")
	}
	return w.read(ctx, b)
}

// Close implements sfs.Handle.Close: the watch ends.
func (h *watchHandle) Close() error {
	h.mu.Lock()
	w := h.w
	h.w, h.closed = nil, true
	h.mu.Unlock()
	if w != nil {
		w.close()
		h.s.watches.Add(-1)
	}
	return nil
}
