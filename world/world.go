package world

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
)

// Mode is how a world uses its lower.
type Mode int

// Modes of a world.
const (
	Overlay  Mode = iota // changes go to the upper (the default)
	ReadOnly             // no change at all (EROFS)
	UnsafeRW             // changes go straight to the lower: no upper, no diff
)

var modeNames = [...]string{Overlay: "overlay", ReadOnly: "readonly", UnsafeRW: "unsafe-rw"}

func (m Mode) String() string { return modeNames[m] }

// ParseMode returns the mode called s.
func ParseMode(s string) (Mode, error) {
	for m, n := range modeNames {
		if n == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("world: unknown mode %q: %w", s, syscall.EINVAL)
}

// Whiteout names (OCI image layer format).
const (
	whPrefix   = ".wh."
	opaqueName = ".wh..wh..opq"
)

// World is one world: a lower directory seen through a private upper.
type World struct {
	dir  string
	mode Mode

	// layers is held for reading by every operation and for writing by
	// Apply, Discard and Rebase.
	layers sync.RWMutex
	lower  int // O_PATH descriptor of the lower's root; guarded by layers
	upper  int // O_PATH descriptor of dir/upper (the lower's in UnsafeRW); guarded by layers
	work   int // O_PATH descriptor of dir/work; guarded by layers

	// clog counts the changes of the upper and remembers the paths
	// of the latest: a node whose loc was seen before no change touched
	// its path may use it for its lookups (fresh). The UpperView shares
	// its world's.
	clog *changeLog
	dirs dirCache // the directories resolved, while fresh (resolveDir)

	mu       sync.Mutex               // changes of the upper's names
	inflight map[string]chan struct{} // copy-ups under way, by path; guarded by mu

	meta *meta

	ro   bool   // a view (UpperView): no change at all
	view *World // the UpperView, once asked for; guarded by mu

	copyDone, copyTotal atomic.Int64 // bytes of copy-ups under way (status)
	// The cost of the copy-ups with data finished since Open: how many,
	// their bytes, the time they streamed (status).
	copies, copiedBytes, copyNanos atomic.Int64
	// as runs the changes of an unsafe-rw world as its owner, asWho
	// (WriteAs); nil: as called. Set before the world is served.
	as    *userThread
	asWho cred.Cred

	copyHook    func()       // tests: called after a copy-up's first chunk
	applyHook   func(string) // tests: called when a file is in the lower, before its upper entry goes
	restoreHook func()       // tests: called when Restore's upper is in place, before its origins
}

// Open opens the world kept in dir over lower (an absolute path without
// symbolic links: ELOOP otherwise), creating dir's layout the first
// time, and tidies what a killed Discard left.
func Open(lower, dir string, mode Mode) (*World, error) {
	w := &World{dir: dir, mode: mode, lower: -1, upper: -1, work: -1, inflight: map[string]chan struct{}{}}
	w.clog = newChangeLog()
	if err := w.open(lower); err != nil {
		w.Close()
		return nil, fmt.Errorf("world: open %q: %w", dir, err)
	}
	return w, nil
}

func (w *World) open(lower string) error {
	var err error
	// No symbolic link on the way (the daemon resolved them when the
	// world was made): one swapped in since cannot redirect the world.
	w.lower, err = unix.Openat2(unix.AT_FDCWD, lower, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("lower %q: %w", lower, err)
	}
	if w.mode == UnsafeRW {
		w.meta = newMemMeta()
		w.upper, err = unix.Dup(w.lower)
		return err
	}
	if err := os.MkdirAll(filepath.Join(w.dir, "work"), 0o700); err != nil {
		return err
	}
	if w.work, err = openDir(filepath.Join(w.dir, "work")); err != nil {
		return err
	}
	if err := removeAll(w.work, scratch); err != nil { // a killed Discard's
		return err
	}
	if err := w.makeUpper(w.dir, "upper"); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if w.upper, err = openDir(filepath.Join(w.dir, "upper")); err != nil {
		return err
	}
	if err := w.finishRestore(); err != nil {
		return err
	}
	w.meta, err = openMeta(filepath.Join(w.dir, "origins"), w.shadowed)
	return err
}

// makeUpper makes an empty upper root called name in dir, with the
// lower root's mode, owner and times.
func (w *World) makeUpper(dir, name string) error {
	var st unix.Stat_t
	if err := fstat(w.lower, &st); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
		return err
	}
	fd, err := openDir(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return copyAttrs(fd, &st)
}

// Close releases the world's descriptors.
func (w *World) Close() error {
	if w.as != nil {
		w.as.stop()
		w.as = nil
	}
	if w.view != nil {
		w.view.Close()
	}
	for _, fd := range []int{w.lower, w.upper, w.work} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if w.meta != nil {
		return w.meta.close()
	}
	return nil
}

// Mode returns the world's mode.
func (w *World) Mode() Mode { return w.mode }

// Upper returns the upper directory's path (the lower's in UnsafeRW).
func (w *World) Upper() string { return filepath.Join(w.dir, "upper") }

// Copying returns the bytes copied so far and in all of the copy-ups
// under way.
func (w *World) Copying() (done, total int64) { return w.copyDone.Load(), w.copyTotal.Load() }

// CopyCost is what the copy-ups with data finished since Open cost.
type CopyCost struct {
	Files, Bytes int64
	Time         time.Duration // streaming them, summed
}

// Copied returns the cost of the finished copy-ups.
func (w *World) Copied() CopyCost {
	return CopyCost{Files: w.copies.Load(), Bytes: w.copiedBytes.Load(), Time: time.Duration(w.copyNanos.Load())}
}

// shadowed reports whether the upper holds an entry or a whiteout at
// path: origins of other paths are stale (a killed Discard's).
func (w *World) shadowed(path string) bool {
	dir, name := split(path)
	for _, n := range []string{name, whPrefix + name} {
		if _, err := lstatAt(w.upper, join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// changed marks a change of the upper: nodes resolve again.
func (w *World) changed(paths ...string) { w.clog.record(paths...) }

// writable refuses changes in a read-only world or view.
func (w *World) writable() error {
	if w.mode == ReadOnly || w.ro {
		return syscall.EROFS
	}
	return nil
}

// checkName refuses names that are not one plain path component, and
// the reserved whiteout names (in a world with an upper).
func (w *World) checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return syscall.EINVAL
	}
	if w.reserved(name) {
		return syscall.EINVAL
	}
	return nil
}

// reserved reports whether name is a whiteout name the union hides.
func (w *World) reserved(name string) bool {
	return w.mode != UnsafeRW && strings.HasPrefix(name, whPrefix)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// split returns path's directory ("" for the root) and last name.
func split(path string) (string, string) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}
