package world

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// scratch is the name under work/ of a discarded upper (and of a
// directory Mkdir is making opaque).
const scratch = "discard"

// Discard throws the world's changes away. A new empty upper is made in
// work/ and exchanged with the old one in one rename (RENAME_EXCHANGE),
// so a kill leaves either the whole old upper or the new one; the old
// one is then removed (by Open, after a kill).
func (w *World) Discard() error {
	if err := w.noChanges("discard"); err != nil {
		return err
	}
	w.layers.Lock()
	defer w.layers.Unlock()
	defer w.changed()
	if err := w.discard(); err != nil {
		return fmt.Errorf("discard: %w", err)
	}
	return nil
}

func (w *World) discard() error {
	if err := removeAll(w.work, scratch); err != nil {
		return err
	}
	work := filepath.Join(w.dir, "work")
	if err := w.makeUpper(work, scratch); err != nil {
		return err
	}
	if err := w.swapUpper(); err != nil {
		return err
	}
	if err := w.meta.reset(); err != nil {
		return err
	}
	return removeAll(w.work, scratch)
}

// swapUpper exchanges work/discard with the upper in one rename and
// opens the new upper (the old one is then work/discard). layers held.
func (w *World) swapUpper() error {
	err := unix.Renameat2(w.work, scratch, unix.AT_FDCWD, w.Upper(), unix.RENAME_EXCHANGE)
	if err != nil {
		return err
	}
	fd, err := openDir(w.Upper())
	if err != nil {
		return err
	}
	unix.Close(w.upper)
	w.upper = fd
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.view != nil {
		return w.view.setUpper(fd)
	}
	return nil
}

// Rebase takes the lower's current state as the base where the world's
// change is no longer one: a modified file whose lower now has the same
// type, mode and bytes, and a deletion of what the lower no longer has,
// are dropped from the upper. The other changes stay, conflicts
// included (Apply reports them). It returns how many were dropped.
func (w *World) Rebase() (int, error) {
	if err := w.noChanges("rebase"); err != nil {
		return 0, err
	}
	w.layers.Lock()
	defer w.layers.Unlock()
	defer w.changed()
	chs, err := w.changes()
	if err != nil {
		return 0, fmt.Errorf("rebase: %w", err)
	}
	n := 0
	for _, ch := range chs {
		drop, err := w.rebaseOne(ch)
		if err != nil {
			return n, fmt.Errorf("rebase: %q: %w", ch.Path, err)
		}
		if drop {
			n++
		}
	}
	return n, nil
}

// rebaseOne drops ch if the lower now agrees with it.
func (w *World) rebaseOne(ch Change) (bool, error) {
	ls, err := lstatAt(w.lower, ch.Path)
	has := err == nil
	switch {
	case ch.Kind == Deleted && !has:
		if err := inParent(w.upper, ch.Path, unwhite); err != nil {
			return false, err
		}
		return true, w.meta.dropBase(ch.Path)
	case ch.Kind == Deleted, ch.Dir, !has:
		return false, nil
	}
	us, err := lstatAt(w.upper, ch.Path)
	if err != nil {
		return false, err
	}
	if us.Uid != ls.Uid || us.Gid != ls.Gid || !w.sameAsLower(ch.Path, &ls) {
		return false, nil
	}
	if err := w.removeUpper(ch.Path, &us); err != nil {
		return false, err
	}
	return true, w.meta.dropBase(ch.Path)
}
