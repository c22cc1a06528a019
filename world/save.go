package world

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A saved world (a sandbox's snapshot keeps one, docs/worlds.md
// "Snapshots and clones"):
//
//	<dir>/upper     a copy of the upper, whiteouts, hard links and owners kept
//	<dir>/origins   the origins, the copied-up files named by the copy's inodes
const (
	savedUpper   = "upper"
	savedOrigins = "origins"
)

// SaveStats is what Save wrote: how many regular files were cloned
// (FICLONE: the copy shares the file system's blocks until either side
// writes) or copied (the file system cannot clone), and their bytes.
type SaveStats struct {
	Cloned, Copied int
	Bytes          int64
}

// Save writes a copy of the world's changes into dir, which must not
// exist (its parent must): the upper and the origins, as they are at one
// instant (the world's other operations wait while it runs; writes
// through files already open go on), not synced. A world without upper
// (UnsafeRW) has nothing to save (EINVAL).
func (w *World) Save(dir string) (SaveStats, error) {
	var st SaveStats
	if err := w.noChanges("save"); err != nil {
		return st, err
	}
	w.layers.Lock()
	defer w.layers.Unlock()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return st, fmt.Errorf("save: %w", err)
	}
	dst, err := openDir(dir)
	if err != nil {
		return st, fmt.Errorf("save: %w", err)
	}
	defer unix.Close(dst)
	tc := newTreeCopy(w.upper, dst)
	if err := tc.copy("", savedUpper); err != nil {
		return tc.stats, fmt.Errorf("save: %w", err)
	}
	base, inos := w.meta.state()
	if err := writeSync(filepath.Join(dir, savedOrigins), encodeMeta(base, tc.mapInos(inos))); err != nil {
		return tc.stats, fmt.Errorf("save: %w", err)
	}
	// Not synced here: the snapshot that holds the copy syncs each of
	// its files when it commits (ctl's syncTree), and one syncfs would
	// flush the whole (shared) file system.
	return tc.stats, nil
}

// Restore replaces the world's changes by those Save wrote into dir:
// the saved upper is copied into work/ (cloned where the file system
// can), its origins written beside the world's (restoreJournal, synced),
// the copy exchanged with the upper in one rename, as Discard does, and
// the journal renamed over the origins. A kill before the exchange leaves the world as
// it was; one after it leaves the saved upper, whose origins Open then
// installs (finishRestore).
func (w *World) Restore(dir string) error {
	if err := w.noChanges("restore"); err != nil {
		return err
	}
	m, err := loadMeta(filepath.Join(dir, savedOrigins))
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	src, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer unix.Close(src)
	w.layers.Lock()
	defer w.layers.Unlock()
	defer w.changed()
	if err := removeAll(w.work, scratch); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	tc := newTreeCopy(src, w.work)
	if err := tc.copy(savedUpper, scratch); err != nil {
		removeAll(w.work, scratch)
		return fmt.Errorf("restore: %w", err)
	}
	inos := tc.mapInos(m.inos)
	var st unix.Stat_t
	if err := unix.Fstatat(w.work, scratch, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		removeAll(w.work, scratch)
		return fmt.Errorf("restore: %w", err)
	}
	journal := filepath.Join(w.dir, restoreJournal(st.Ino))
	if err := writeSync(journal, encodeMeta(m.base, inos)); err != nil {
		removeAll(w.work, scratch)
		return fmt.Errorf("restore: %w", err)
	}
	if err := w.swapUpper(); err != nil {
		os.Remove(journal)
		return fmt.Errorf("restore: %w", err)
	}
	if w.restoreHook != nil {
		w.restoreHook()
	}
	if err := w.meta.adopt(journal, m.base, inos); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return removeAll(w.work, scratch)
}

// restoreJournal is the name, in the world's directory, of the origins
// a Restore is installing: written before its upper is exchanged in and
// named after that upper's inode number, so that Open, finding one,
// knows whether the exchange happened (finishRestore).
func restoreJournal(ino uint64) string { return fmt.Sprintf("origins.restore-%d", ino) }

// finishRestore completes or drops a Restore that was killed (Open,
// before it reads the origins): a journal named after the upper's inode
// number is the upper's origins (the exchange happened; the origins may
// not have been replaced), any other is dropped (the exchange did not).
func (w *World) finishRestore() error {
	journals, err := filepath.Glob(filepath.Join(w.dir, "origins.restore-*"))
	if err != nil || len(journals) == 0 {
		return err
	}
	var st unix.Stat_t
	if err := fstat(w.upper, &st); err != nil {
		return err
	}
	for _, j := range journals {
		if filepath.Base(j) == restoreJournal(st.Ino) {
			if err := os.Rename(j, filepath.Join(w.dir, "origins")); err != nil {
				return err
			}
			continue
		}
		if err := os.Remove(j); err != nil {
			return err
		}
	}
	return nil
}
