package world

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// copyChunk is how much of a file a copy-up copies per call.
const copyChunk = 1 << 20

// copyUp makes sure path is in the upper, copying it up from the lower
// (with its data unless data is false: an O_TRUNC open) and its parent
// directories too. A regular file's data is streamed into an unnamed
// file (O_TMPFILE) in its upper directory with only layers held for
// reading, then linked into place under mu; two copy-ups of one path
// share the first's work. Called with layers held for reading.
func (w *World) copyUp(path string, data bool) error {
	for {
		w.mu.Lock()
		l, err := w.resolve(path)
		if err != nil || l.up {
			w.mu.Unlock()
			return err
		}
		if l.isDir() {
			_, err := w.upperDirs(path)
			w.mu.Unlock()
			return err
		}
		if done := w.inflight[path]; done != nil {
			w.mu.Unlock()
			<-done
			continue
		}
		dir, _ := split(path)
		if _, err := w.upperDirs(dir); err != nil {
			w.mu.Unlock()
			return err
		}
		if !isReg(&l.ls) {
			err := w.copySpecial(path, &l.ls)
			w.mu.Unlock()
			return err
		}
		done := make(chan struct{})
		w.inflight[path] = done
		seen := &sight{l: l, gen: w.clog.load()}
		w.mu.Unlock()

		err = w.copyFile(path, seen, data)
		w.mu.Lock()
		delete(w.inflight, path)
		close(done)
		w.mu.Unlock()
		return err
	}
}

// upperDirs makes sure the directory path is in the upper, copying up
// it and its ancestors (mode, owner, times, never data); a directory in
// the upper needs nothing more (so are those above it). One to copy is
// stated again: its cached resolution may hold older attributes than
// the lower's now. Called with mu held.
func (w *World) upperDirs(path string) (loc, error) {
	l, err := w.resolveDir(path)
	if err == nil && l.isDir() && !l.up {
		l, err = w.resolve(path)
	}
	switch {
	case err != nil:
		return l, err
	case !l.isDir():
		return l, syscall.ENOTDIR
	case l.up:
		return l, nil
	}
	dir, _ := split(path)
	if _, err := w.upperDirs(dir); err != nil {
		return l, err
	}
	err = w.copyDir(path, &l.ls)
	w.changed(path)
	if err != nil {
		return l, err
	}
	if l.us, err = lstatAt(w.upper, path); err != nil {
		return l, err
	}
	l.up = true
	return l, nil
}

// copyDir makes the directory path in the upper with st's attributes.
func (w *World) copyDir(path string, st *unix.Stat_t) error {
	err := inParent(w.upper, path, func(dirfd int, name string) error {
		return unix.Mkdirat(dirfd, name, 0o700)
	})
	if err != nil {
		return err
	}
	return withAt(w.upper, path, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error { return copyAttrs(fd, st) })
}

// copySpecial copies up a symbolic link, device, pipe or socket: no data
// to stream, so all under mu.
func (w *World) copySpecial(path string, st *unix.Stat_t) error {
	var target string
	if isLink(st) {
		var err error
		if target, err = readlinkAt(w.lower, path); err != nil {
			return err
		}
	}
	defer w.changed(path)
	err := inParent(w.upper, path, func(dirfd int, name string) error {
		if isLink(st) {
			return unix.Symlinkat(target, dirfd, name)
		}
		return unix.Mknodat(dirfd, name, st.Mode, int(st.Rdev))
	})
	if err != nil {
		return err
	}
	return w.copiedUp(path, st)
}

// copiedUp records path's base and its upper copy's lower inode, and
// gives the copy st's attributes.
func (w *World) copiedUp(path string, st *unix.Stat_t) error {
	return withAt(w.upper, path, unix.O_PATH, func(fd int) error {
		var us unix.Stat_t
		if err := fstat(fd, &us); err != nil {
			return err
		}
		if err := copyAttrs(fd, st); err != nil {
			return err
		}
		if err := w.meta.setIno(us.Ino, st.Ino); err != nil {
			return err
		}
		return w.meta.setBase(path, identOf(st))
	})
}

// copyFile streams the lower's regular file path, seen as s (a lower
// file), into an unnamed upper file, then (under mu, if path is still
// that file) links it in.
func (w *World) copyFile(path string, s *sight, data bool) error {
	st := &s.l.ls
	dir, name := split(path)
	tmp, err := openAt(w.upper, dir, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(tmp)
	if data {
		if err := w.copyData(path, tmp, st.Size); err != nil {
			return err
		}
	}
	if err := copyAttrs(tmp, st); err != nil {
		return err
	}
	var us unix.Stat_t
	if err := fstat(tmp, &us); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, _, ok := w.restat(path, s); !ok {
		l, err := w.resolve(path)
		switch {
		case err != nil:
			return err
		case l.up:
			return nil // made meanwhile (a create over a whiteout): that one wins
		case !sameFile(&l.ls, st):
			return syscall.EAGAIN // the lower's file was replaced meanwhile
		}
	}
	err = withAt(w.upper, dir, unix.O_PATH|unix.O_DIRECTORY, func(dirfd int) error {
		return unix.Linkat(unix.AT_FDCWD, procPath(tmp), dirfd, name, unix.AT_SYMLINK_FOLLOW)
	})
	w.changed(path)
	if err != nil {
		return err
	}
	if err := w.meta.setIno(us.Ino, st.Ino); err != nil {
		return err
	}
	return w.meta.setBase(path, identOf(st))
}

// copyData copies the lower's path (of size bytes) into dst.
func (w *World) copyData(path string, dst int, size int64) error {
	src, err := openAt(w.lower, path, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	w.copyTotal.Add(size)
	var done int64
	defer func() { w.copyTotal.Add(-size); w.copyDone.Add(-done) }()
	start := time.Now()
	err = copyRange(src, dst, func(n int) {
		done += int64(n)
		w.copyDone.Add(int64(n))
		if w.copyHook != nil {
			w.copyHook()
		}
	})
	if err == nil {
		w.copies.Add(1)
		w.copiedBytes.Add(done)
		w.copyNanos.Add(int64(time.Since(start)))
	}
	return err
}
