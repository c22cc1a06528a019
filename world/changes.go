package world

import (
	"strings"
	"sync"
	"sync/atomic"
)

// changeLogSize is how many of the latest changes a world remembers by
// path: a node seen more changes ago than that is resolved again.
const changeLogSize = 64

// changeLog counts a world's changes of the upper (the generation, from
// 1) and remembers the path each of the latest changeLogSize changed,
// so that a node seen at an earlier generation can tell whether any
// change since touched its path or a directory above it (touches). A
// change is recorded after it is made: a node seen while it was under
// way has an older generation, and is resolved again.
//
// Until 2026-12-04 a world kept only the count, and every change (a
// file created or copied up anywhere) made every node resolve its path
// from the root at its next use: about eight system calls a directory
// on the way, three resolutions in a copy-up's open.
type changeLog struct {
	gen atomic.Uint64 // the generation: the changes made so far

	mu    sync.Mutex
	paths [changeLogSize]string // paths[g%changeLogSize]: what change g touched ("": every path); guarded by mu
}

func newChangeLog() *changeLog {
	c := &changeLog{}
	c.gen.Store(1)
	return c
}

// load is the current generation.
func (c *changeLog) load() uint64 { return c.gen.Load() }

// record counts one change per path (the path changed, or everything
// when none is given), after it is made.
func (c *changeLog) record(paths ...string) {
	if len(paths) == 0 {
		paths = []string{""}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range paths {
		g := c.gen.Load() + 1
		c.paths[g%changeLogSize] = p
		c.gen.Store(g)
	}
}

// touches reports whether a change after generation g touched path: the
// path itself, a directory above it (its layers may differ now), or
// every path; also when g is unknown (0) or older than the log. If none
// did, it returns the generation it looked up to, at which what was
// seen of path at g still holds. Changes below path do not touch it: a
// directory's own entries (up, low, opaque) change only by a change of
// the directory itself (a copy-up of a child first copies up its
// directories, recording each).
func (c *changeLog) touches(g uint64, path string) (bool, uint64) {
	now := c.gen.Load()
	switch {
	case g != 0 && g == now:
		return false, now
	case g == 0 || g > now || now-g >= changeLogSize:
		return true, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now = c.gen.Load()
	if now-g >= changeLogSize {
		return true, 0
	}
	for k := g + 1; k <= now; k++ {
		if within(path, c.paths[k%changeLogSize]) {
			return true, 0
		}
	}
	return false, now
}

// within reports whether path is dir or lies under it ("" is the root,
// above every path).
func within(path, dir string) bool {
	return dir == "" || path == dir || strings.HasPrefix(path, dir) && path[len(dir)] == '/'
}
