package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// watchMask is what a watch asks inotify(7) for on each directory.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// watcher is one watch: an inotify descriptor over a directory (and,
// recursive, its subdirectories), a goroutine turning its events into
// lines, and the bounded queue of lines not yet read.
//
// Every directory is reached through the agent's fsTree, by the rule
// the rest of fs/ follows (openat2 with RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS: no symbolic link on the way or at the end is
// followed), and the inotify watch is added on the opened descriptor's
// /proc/self/fd/N, which names that inode, never a path.
type watcher struct {
	f         *os.File // the inotify descriptor, non-blocking (read through the runtime's poller)
	t         *fsTree  // the agent's fs/: watched paths are below its root
	recursive bool
	top       int32 // the watched directory's wd

	// dirs maps wd to its directory, relative to the watched one ("" for
	// it). Only the loop goroutine uses it once the watch has started.
	dirs map[int32]string

	mu      sync.Mutex    // guards the fields below
	queue   []string      // event lines not yet read, each ending in \n
	bytes   int           // bytes in queue
	partial string        // the rest of a line a short read cut
	lost    bool          // events were dropped since the last overflow line
	ended   bool          // no more events: the directory is gone or the watch closed
	change  chan struct{} // closed and replaced when the fields change
}

// newWatcher watches dir, an absolute guest path (cleaned), below t's
// root.
func newWatcher(t *fsTree, dir string, recursive bool) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, msg.Errorf(msg.Errno(err), "watch: inotify_init1: %v", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), t: t, recursive: recursive,
		dirs: map[int32]string{}, change: make(chan struct{})}
	wd, err := w.add(dir, "")
	if err == nil && recursive {
		err = w.addBelow(dir, "", nil)
	}
	if err != nil {
		w.f.Close()
		return nil, err
	}
	w.top = wd
	go w.loop(dir)
	return w, nil
}

// open opens guest directory top/rel through the tree (no symbolic link
// followed): flags are O_PATH or O_RDONLY. A symbolic link on the way is
// ELOOP, one at the end ENOTDIR, each with a text saying so.
func (w *watcher) open(top, rel string, flags int) (int, error) {
	p := path.Join(top, rel)
	fd, err := w.t.open(strings.TrimPrefix(p, "/"), flags|unix.O_DIRECTORY)
	switch {
	case err == unix.ELOOP:
		return -1, msg.Errorf(syscall.ELOOP, "watch: %s: a symbolic link on the path (links are not followed)", msg.Cite(p))
	case err == unix.ENOTDIR && w.isLink(p):
		return -1, msg.Errorf(syscall.ENOTDIR, "watch: %s: a symbolic link, not a directory (links are not followed)", msg.Cite(p))
	case err != nil:
		return -1, msg.Errorf(msg.Errno(err), "watch: %s: %v", msg.Cite(p), err)
	}
	return fd, nil
}

// isLink reports whether guest path p is itself a symbolic link (reached
// without following any).
func (w *watcher) isLink(p string) bool {
	var st unix.Stat_t
	err := w.t.with(strings.TrimPrefix(p, "/"), unix.O_PATH, func(fd int) error { return fstat(fd, &st) })
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// add watches directory top/rel and records its wd.
func (w *watcher) add(top, rel string) (int32, error) {
	if len(w.dirs) >= maxWatchDirs {
		return 0, msg.Errorf(syscall.ENOSPC, "watch: more than %d directories under %s", maxWatchDirs, msg.Cite(top))
	}
	dfd, err := w.open(top, rel, unix.O_PATH)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	// The descriptor's magic link is followed (it names the opened inode),
	// so no IN_DONT_FOLLOW. Control, not Fd: Fd would make the inotify
	// descriptor blocking, and Control keeps it from being closed (and its
	// number reused) meanwhile.
	var wd int
	rc, err := w.f.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			wd, err = unix.InotifyAddWatch(int(fd), "/proc/self/fd/"+strconv.Itoa(dfd), watchMask)
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		return 0, msg.Errorf(msg.Errno(err), "watch: %s: %v", msg.Cite(path.Join(top, rel)), err)
	}
	w.dirs[int32(wd)] = rel
	return int32(wd), nil
}

// addBelow watches every directory below top/rel (none reached through
// a symbolic link), at most maxWatchDirs in all; found, if not nil, is
// told of every entry below it (files and directories).
func (w *watcher) addBelow(top, rel string, found func(name string)) error {
	ents, err := w.readDir(top, rel)
	if err != nil {
		return nil // gone, unreadable or replaced by a link meanwhile: nothing to watch
	}
	for _, e := range ents {
		sub := path.Join(rel, e.Name())
		if found != nil {
			found(sub)
		}
		if !e.IsDir() {
			continue
		}
		if _, err := w.add(top, sub); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return err
			}
			continue // gone meanwhile
		}
		if err := w.addBelow(top, sub, found); err != nil {
			return err
		}
	}
	return nil
}

// readDir lists directory top/rel, opened through the tree, by name.
func (w *watcher) readDir(top, rel string) ([]os.DirEntry, error) {
	fd, err := w.open(top, rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path.Join(top, rel))
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// loop reads inotify events until the descriptor is closed or the
// watched directory is gone.
func (w *watcher) loop(top string) {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.end()
			return
		}
		evs, perr := parseInotify(buf[:n])
		for _, ev := range evs {
			if w.handle(top, ev) {
				w.end()
				return
			}
		}
		if perr != nil {
			w.push("overflow")
		}
	}
}

// handle turns one inotify event into a line; it reports whether the
// watch has ended (the watched directory's watch was removed).
func (w *watcher) handle(top string, ev inotifyEvent) (ended bool) {
	if ev.mask&unix.IN_Q_OVERFLOW != 0 {
		w.push("overflow")
		return false
	}
	dir, ok := w.dirs[ev.wd]
	if !ok {
		return false
	}
	if ev.mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, ev.wd)
		return ev.wd == w.top
	}
	if ev.name == "" {
		return false // an event of the directory itself: its parent reports it
	}
	name := path.Join(dir, ev.name)
	typ := eventType(ev.mask)
	if typ == "" {
		return false
	}
	if w.recursive && ev.mask&unix.IN_ISDIR != 0 && typ == "create" {
		w.follow(top, name)
		return false
	}
	w.push(typ + " " + msg.Quote(name))
	return false
}

// follow reports new directory name (made or moved in) and watches it
// and what is below it: its own watch is added before its create line is
// queued, so a reader that saw the line knows it is watched. What was
// made in it before that has no event of its own: each entry found is
// reported as created (one made meanwhile may so be reported twice,
// never missed).
func (w *watcher) follow(top, name string) {
	_, err := w.add(top, name)
	w.push("create " + msg.Quote(name))
	if err == nil {
		err = w.addBelow(top, name, func(sub string) { w.push("create " + msg.Quote(sub)) })
	}
	if errors.Is(err, syscall.ENOSPC) {
		w.markLost()
	}
}

// eventType is E2B's name of an inotify event, "" for none.
func eventType(mask uint32) string {
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		return "create"
	case mask&unix.IN_MODIFY != 0:
		return "write"
	case mask&unix.IN_DELETE != 0:
		return "remove"
	case mask&unix.IN_MOVED_FROM != 0:
		return "rename"
	case mask&unix.IN_ATTRIB != 0:
		return "chmod"
	}
	return ""
}

// inotifyEvent is one struct inotify_event (inotify(7)).
type inotifyEvent struct {
	wd     int32
	mask   uint32
	cookie uint32
	name   string
}

// inotifyHeader is the size of struct inotify_event without its name:
//
//	+-------+--------+----------+-------+----------------------+
//	| wd s32| mask u32| cookie u32| len u32| name[len], NUL padded |
//	+-------+--------+----------+-------+----------------------+
const inotifyHeader = 16

// parseInotify splits a read of an inotify descriptor into its events;
// a truncated or overlong record ends the parse with an error (the
// events before it are returned).
func parseInotify(b []byte) ([]inotifyEvent, error) {
	var evs []inotifyEvent
	for len(b) > 0 {
		if len(b) < inotifyHeader {
			return evs, fmt.Errorf("inotify: %d bytes left, short of a header", len(b))
		}
		n := binary.NativeEndian.Uint32(b[12:16])
		if uint64(n) > uint64(len(b)-inotifyHeader) {
			return evs, fmt.Errorf("inotify: name of %d bytes, %d left", n, len(b)-inotifyHeader)
		}
		name := b[inotifyHeader : inotifyHeader+int(n)]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		evs = append(evs, inotifyEvent{
			wd:     int32(binary.NativeEndian.Uint32(b[0:4])),
			mask:   binary.NativeEndian.Uint32(b[4:8]),
			cookie: binary.NativeEndian.Uint32(b[8:12]),
			name:   string(name),
		})
		b = b[inotifyHeader+int(n):]
	}
	return evs, nil
}
