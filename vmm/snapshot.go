package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

// MemoryFile is the memory file inside a snapshot directory: a restore
// sets MachineConfig.MemFile to <dir>/MemoryFile and gets dir's whole
// chain mapped.
const MemoryFile = snapshot.MemFile

const pageSize = snapshot.PageSize

// Snapshot writes a paused machine's snapshot at dir (which must not
// exist), atomically: a full one if parent is "", else a delta over
// parent, which must be the machine's last snapshot or the one it was
// restored from or one of its ancestors, in the same directory as dir.
// A delta holds only the pages dirtied since that snapshot (over an
// ancestor: with the pages of the snapshots between, folded in). When parent's chain is too long or
// fragmented (snapshot.Shape.NeedsCompaction) the snapshot is written full
// instead: check the result's Full. On failure nothing is written and
// the dirty pages stay counted for the next try.
func (m *Machine) Snapshot(dir, parent string) (*snapshot.Snapshot, error) {
	return m.snapshot("snapshot", dir, parent, true)
}

// SnapshotToEnd is Snapshot for a machine that is to end after it (a
// pause to disk): it leaves dirty-page tracking as it is instead of
// re-arming it, which with soft-dirty is a clear_refs walk of the whole
// process's page tables that makes the guest fault its working set in
// again. Should the machine go on after all, its next delta holds the
// pages dirtied before this snapshot too: larger, never wrong.
func (m *Machine) SnapshotToEnd(dir, parent string) (*snapshot.Snapshot, error) {
	return m.snapshot("snapshot", dir, parent, false)
}

// snapshot is Snapshot, its errors beginning with verb; rearm re-arms
// dirty-page tracking (SnapshotToEnd).
func (m *Machine) snapshot(verb, dir, parent string, rearm bool) (*snapshot.Snapshot, error) {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return nil, fmt.Errorf("%s: %w", verb, ErrEnded)
	}
	if !m.paused {
		return nil, fmt.Errorf("%s: %w", verb, ErrNotPaused)
	}
	var tm snapshot.Timing
	t := snapshot.Now()
	st, err := m.saveLocked()
	if err != nil {
		return nil, err
	}
	tm.Mark("save-state", &t)
	state, err := EncodeState(st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	tm.Mark("encode-state", &t)
	r := m.ram
	held, err := r.collect(m.vm, rearm, &tm, &t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	over, pages, shape, err := r.deltaOver(parent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	if over == nil {
		if pages, err = r.fullPages(held); err != nil {
			return nil, fmt.Errorf("%s: %w", verb, err)
		}
	}
	tm.Mark("chain+pages", &t)
	s, err := snapshot.Write(dir, r.mem, pages, over, state)
	if err != nil {
		return nil, err
	}
	tm.Mark("write", &t)
	s.Took = append(tm, s.Took...)
	r.known.Or(r.dirty)
	r.dirty.Clear()
	r.base, r.shape = s, append(shape, snapshot.Link{ID: s.ID, Runs: len(s.Runs)})
	return s, nil
}

// deltaOver returns what a delta over parent ("": none) holds: parent,
// the machine's last snapshot or the one it was restored from (r.base)
// or one of that one's ancestors, and the pages dirtied since it, which
// for an ancestor include the pages of the snapshots after it in the
// chain (a fold: those need not be kept for the new one); and the run
// counts of the chain through it. A nil parent means a full snapshot:
// none was asked, or the chain is due for compaction.
//
// A delta over r.base itself, the common case, checks that the store
// still holds the snapshot this machine wrote or restored (a stat of its
// meta, snapshot.Unchanged; its read and checksum if that stat differs),
// checks that the snapshots before it are still there (a
// stat each) and takes the chain's shape from r.shape: reading the
// whole chain (Open's read, decode and checksum of each meta) cost about
// a millisecond per snapshot in it, at every snapshot, in the lab.
func (r *guestRAM) deltaOver(parent string) (*snapshot.Snapshot, snapshot.Pages, snapshot.Shape, error) {
	if parent == "" {
		return nil, r.dirty, nil, nil
	}
	if r.base == nil {
		return nil, nil, nil, msg.Errorf(syscall.EINVAL, "%s is not this machine's last snapshot nor an ancestor of it", msg.Cite(parent))
	}
	if n := len(r.shape); filepath.Base(parent) == r.base.ID && n > 0 && r.shape[n-1].ID == r.base.ID {
		s := r.base
		if s.Unchanged(parent) {
			c := *s
			c.Dir = filepath.Clean(parent)
			s = &c
		} else {
			var err error
			if s, err = snapshot.Open(parent); err != nil {
				return nil, nil, nil, err
			}
			if s.Sum != r.base.Sum {
				return nil, nil, nil, msg.Errorf(syscall.EINVAL, "the store beside %s does not hold this machine's last snapshot", msg.Cite(parent))
			}
		}
		if r.shape.NeedsCompaction(len(r.dirty.Runs(0))) {
			return nil, r.dirty, nil, nil
		}
		if err := r.shape[:n-1].Present(filepath.Dir(parent)); err != nil {
			return nil, nil, nil, err
		}
		return s, r.dirty, r.shape, nil
	}
	chain, err := snapshot.Chain(filepath.Join(filepath.Dir(parent), r.base.ID))
	if err != nil {
		return nil, nil, nil, err
	}
	i := len(chain) - 1
	if chain[i].Sum != r.base.Sum {
		return nil, nil, nil, msg.Errorf(syscall.EINVAL, "the store beside %s does not hold this machine's last snapshot", msg.Cite(parent))
	}
	for i >= 0 && chain[i].ID != filepath.Base(parent) {
		i--
	}
	if i < 0 {
		return nil, nil, nil, msg.Errorf(syscall.EINVAL, "%s is not this machine's last snapshot nor an ancestor of it", msg.Cite(parent))
	}
	pages := r.dirty
	if i < len(chain)-1 {
		pages = snapshot.Since(chain, i, r.size/pageSize)
		pages.Or(r.dirty)
	}
	shape := snapshot.ShapeOf(chain[:i+1])
	if shape.NeedsCompaction(len(pages.Runs(0))) {
		return nil, r.dirty, nil, nil
	}
	return chain[i], pages, shape, nil
}

// fullPages is every page that may hold data: present pages of anonymous
// RAM (held, if collect read them, else read here), or for restored RAM
// the chain's pages and every page dirtied since.
func (r *guestRAM) fullPages(held snapshot.Pages) (snapshot.Pages, error) {
	if !r.restored {
		if held != nil {
			return held, nil
		}
		return r.present()
	}
	s := snapshot.NewPages(r.size / pageSize)
	s.Or(r.known)
	s.Or(r.dirty)
	return s, nil
}

// SaveDir writes a paused machine's full snapshot at dir (Snapshot(dir,
// "")); dir may exist if it is empty (it is replaced).
func (m *Machine) SaveDir(dir string) error {
	os.Remove(dir) // only if empty; Write refuses anything else
	_, err := m.snapshot("save", dir, "", true)
	return err
}

// LoadState reads the machine state of the snapshot at dir.
func LoadState(dir string) (*State, error) {
	s, err := snapshot.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	st, err := DecodeState(s.State)
	if err != nil {
		return nil, fmt.Errorf("load state %s: %w", msg.Cite(dir), err)
	}
	return st, nil
}

// DirtyTracking names the dirty-page mechanism in use: TrackSoftDirty or
// TrackDirtyLog (for the status line).
func (m *Machine) DirtyTracking() string { return m.ram.tracking }

// MemoryStats describe guest RAM's mapping.
type MemoryStats struct {
	Tracking string // DirtyTracking
	Maps     int    // mmap calls that built RAM: 1 + the restored deltas' runs
	Resident uint64 // pages present in the VMM's page tables (-1 unknown)
	Dirty    uint64 // pages counted dirty since the last snapshot, not yet collected ones
}

// MemoryStats reads RAM's mapping statistics.
func (m *Machine) MemoryStats() (MemoryStats, error) {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return MemoryStats{}, fmt.Errorf("memory stats: %w", ErrEnded)
	}
	r := m.ram
	ms := MemoryStats{Tracking: r.tracking, Maps: r.maps, Dirty: r.dirty.Count(), Resident: ^uint64(0)}
	if r.pagemap != nil {
		ms.Resident = 0
		if err := r.scanPagemap(pmPresent, func(_, _ uint64) { ms.Resident++ }); err != nil {
			return ms, fmt.Errorf("memory stats: %w", err)
		}
	}
	return ms, nil
}
