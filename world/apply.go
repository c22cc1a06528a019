package world

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/cred"
)

// ConflictError is Apply's refusal: the paths whose lower entry changed
// since the world first changed them. Its errno is EBUSY.
type ConflictError struct{ Paths []string }

func (e *ConflictError) Error() string {
	q := make([]string, len(e.Paths))
	for i, p := range e.Paths {
		q[i] = quotePath(p)
	}
	return "apply: changed in the lower since the world changed them: " + strings.Join(q, " ")
}

// Unwrap gives the errno.
func (e *ConflictError) Unwrap() error { return syscall.EBUSY }

// noChanges refuses Apply, Discard and Rebase in a world without upper.
func (w *World) noChanges(verb string) error {
	if w.mode == UnsafeRW {
		return fmt.Errorf("%s: an unsafe-rw world has no changes: %w", verb, syscall.EINVAL)
	}
	return nil
}

// Apply writes the world's changes into the lower, then removes them
// from the upper. Unless force is set it first refuses (ConflictError)
// if any path it would change changed in the lower since the world
// first changed it; a path whose lower entry already equals the world's
// is no conflict (a re-run after a kill). File by file: the new content
// is written to a temporary name beside the target, synced and renamed
// over it, the directory synced, and only then the upper's entry
// removed; a killed Apply leaves each lower file old or new and the rest
// of the upper in place, and a re-run completes it. The world is stopped
// (layers held) meanwhile. It writes as the daemon (ApplyAs: as a user).
func (w *World) Apply(force bool) error {
	if err := w.noChanges("apply"); err != nil {
		return err
	}
	return w.apply(force, lowerWriter{})
}

// ApplyAs is Apply writing into the lower with who's file system
// credentials (userThread): the kernel refuses (EACCES, EPERM) every
// change who could not make there, and what it makes is who's. The
// upper is read and tidied as the daemon. Who the daemon runs as
// applies as itself.
func (w *World) ApplyAs(force bool, who cred.Cred) error {
	if err := w.noChanges("apply"); err != nil {
		return err
	}
	if int(who.UID) == os.Geteuid() {
		return w.apply(force, lowerWriter{})
	}
	t, err := startUser(who)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer t.stop()
	return w.apply(force, lowerWriter{t: t, who: who})
}

func (w *World) apply(force bool, lw lowerWriter) error {
	w.layers.Lock()
	defer w.layers.Unlock()
	defer w.changed()
	chs, err := w.changes()
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if !force {
		if c, err := w.conflicts(chs); err != nil || len(c) > 0 {
			return orErr(err, &ConflictError{Paths: c})
		}
	}
	for _, ch := range chs {
		if err := w.applyOne(ch, lw); err != nil {
			return fmt.Errorf("apply: %s %q: %w", ch.Kind, ch.Path, err)
		}
	}
	if err := w.tidy(""); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return w.meta.reset()
}

// conflicts lists the paths of chs whose lower entry changed since the
// world's base of them.
func (w *World) conflicts(chs []Change) ([]string, error) {
	var out []string
	deleted := map[string]bool{}
	for _, ch := range chs {
		if underAny(deleted, ch.Path) {
			continue // its lower will have been removed
		}
		base, hasBase := w.meta.getBase(ch.Path)
		cur, err := lstatAt(w.lower, ch.Path)
		has := err == nil
		if !has && err != unix.ENOENT && err != syscall.ENOTDIR {
			return nil, err
		}
		var bad bool
		switch {
		case ch.Kind == Deleted:
			deleted[ch.Path] = true
			bad = has && hasBase && identOf(&cur) != base
		case ch.Dir:
			bad = has && !isDir(&cur)
		case hasBase && !has:
			bad = true
		case has && (!hasBase || identOf(&cur) != base):
			bad = !w.sameAsLower(ch.Path, &cur)
		}
		if bad {
			out = append(out, ch.Path)
		}
	}
	return out, nil
}

// underAny reports whether p or one of its ancestors is in set.
func underAny(set map[string]bool, p string) bool {
	for ; p != ""; p, _ = split(p) {
		if set[p] {
			return true
		}
	}
	return false
}

// sameAsLower reports whether the upper's non-directory p equals the
// lower's (ls): same type and mode, same bytes or link text.
func (w *World) sameAsLower(p string, ls *unix.Stat_t) bool {
	us, err := lstatAt(w.upper, p)
	if err != nil || us.Mode != ls.Mode || us.Size != ls.Size {
		return false
	}
	switch {
	case isLink(&us):
		a, err1 := readlinkAt(w.upper, p)
		b, err2 := readlinkAt(w.lower, p)
		return err1 == nil && err2 == nil && a == b
	case isReg(&us):
		same, err := sameContent(w.upper, w.lower, p)
		return err == nil && same
	}
	return us.Rdev == ls.Rdev
}

// applyOne writes one change into the lower.
func (w *World) applyOne(ch Change, lw lowerWriter) error {
	switch {
	case ch.Kind == Deleted:
		err := lw.run(func() error {
			if err := removeAll(w.lower, ch.Path); err != nil {
				return err
			}
			return syncParent(w.lower, ch.Path)
		})
		if err != nil {
			return err
		}
		if err := inParent(w.upper, ch.Path, unwhite); err != nil {
			return err
		}
		return w.meta.dropBase(ch.Path)
	case ch.Dir:
		return w.applyDir(ch.Path, lw)
	}
	return w.applyFile(ch.Path, lw)
}

// applyDir makes the directory p in the lower (or keeps the one there)
// with the upper's mode, owner and times.
func (w *World) applyDir(p string, lw lowerWriter) error {
	us, err := lstatAt(w.upper, p)
	if err != nil {
		return err
	}
	st := lw.owned(&us)
	return lw.run(func() error {
		err := inParent(w.lower, p, func(dirfd int, name string) error { return unix.Mkdirat(dirfd, name, 0o700) })
		if err != nil && err != unix.EEXIST {
			return err
		}
		return withAt(w.lower, p, unix.O_PATH|unix.O_DIRECTORY, func(fd int) error { return copyAttrs(fd, st) })
	})
}

// lowerWriter is how Apply writes into the lower: as the daemon (t nil)
// or on a userThread with who's credentials.
type lowerWriter struct {
	t   *userThread
	who cred.Cred
}

// run runs f, which writes into the lower.
func (lw lowerWriter) run(f func() error) error {
	if lw.t == nil {
		return f()
	}
	return lw.t.run(f)
}

// owned is st as the lower gets it: the user's own when written as a
// user (who may give files to nobody else).
func (lw lowerWriter) owned(st *unix.Stat_t) *unix.Stat_t {
	c := *st
	if lw.t != nil {
		c.Uid, c.Gid = lw.who.UID, lw.who.GID
	}
	return &c
}

// tidy removes, bottom-up, the opaque markers and the directories an
// Apply emptied from the upper under p.
func (w *World) tidy(p string) error {
	ents, err := listAt(w.upper, p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		cp := join(p, e.Name)
		switch {
		case e.Name == opaqueName:
			err = inParent(w.upper, cp, func(dirfd int, name string) error { return unix.Unlinkat(dirfd, name, 0) })
		case e.Mode.IsDir():
			if err = w.tidy(cp); err == nil {
				err = inParent(w.upper, cp, func(dirfd int, name string) error { return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) })
				if err == unix.ENOTEMPTY || err == unix.EEXIST {
					err = nil
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
