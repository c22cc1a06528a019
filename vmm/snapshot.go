package vmm

import (
	"encoding/json"
	"fmt"
	"os"
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
// restored from, in the same directory as dir. A delta holds only the
// pages dirtied since that snapshot. When parent's chain is too long or
// fragmented (snapshot.NeedsCompaction) the snapshot is written full
// instead: check the result's Full. On failure nothing is written and
// the dirty pages stay counted for the next try.
func (m *Machine) Snapshot(dir, parent string) (*snapshot.Snapshot, error) {
	return m.snapshot("snapshot", dir, parent)
}

// snapshot is Snapshot, its errors beginning with verb.
func (m *Machine) snapshot(verb, dir, parent string) (*snapshot.Snapshot, error) {
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
	state, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	tm.Mark("encode-state", &t)
	r := m.ram
	held, err := r.collect(m.vm, &tm, &t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	var over *snapshot.Snapshot
	if parent != "" {
		chain, err := snapshot.Chain(parent)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", verb, err)
		}
		p := chain[len(chain)-1]
		if r.base == nil || p.Sum != r.base.Sum {
			return nil, msg.Errorf(syscall.EINVAL, "%s: %s is not this machine's last snapshot", verb, msg.Cite(parent))
		}
		if !snapshot.NeedsCompaction(chain, len(r.dirty.Runs(0))) {
			over = p
		}
	}
	pages := r.dirty
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
	r.base = s
	return s, nil
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
	_, err := m.snapshot("save", dir, "")
	return err
}

// LoadState reads the machine state of the snapshot at dir.
func LoadState(dir string) (*State, error) {
	s, err := snapshot.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	var st State
	if err := json.Unmarshal(s.State, &st); err != nil {
		return nil, fmt.Errorf("load state %s: %w", msg.Cite(dir), err)
	}
	return &st, nil
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
