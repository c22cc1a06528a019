package vmm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"
)

// Snapshot file names inside a save directory.
const (
	StateFile  = "state.json"
	MemoryFile = "mem"
)

const pageSize = 4096

// SaveMemory writes guest RAM to path as a sparse file of MemBytes bytes
// (the layout of the host mapping, so a restore maps it 1:1). For fresh
// anonymous RAM only pages present in /proc/self/pagemap are written (the
// others were never touched and read as zero); for RAM mapped from an
// earlier snapshot every non-zero page is. The machine must be paused.
func (m *Machine) SaveMemory(path string) error {
	// Held throughout: Resume cannot run the guest and Close cannot
	// unmap RAM while it is being written.
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.closed {
		return fmt.Errorf("save memory: %w", ErrEnded)
	}
	if !m.paused {
		return fmt.Errorf("save memory: %w", ErrNotPaused)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("save memory: %w", err)
	}
	defer f.Close()
	mem := m.ram.mem
	if err := f.Truncate(int64(len(mem))); err != nil {
		return fmt.Errorf("save memory: %w", err)
	}
	var present func(page int) bool
	if !m.ram.file {
		pm := m.ram.pagemap // opened before any privilege drop
		if pm == nil {
			if pm, err = os.Open("/proc/self/pagemap"); err != nil {
				return fmt.Errorf("save memory: %w", err)
			}
			defer pm.Close()
		}
		ents := make([]byte, 8*(len(mem)/pageSize))
		base := int64(uintptr(unsafe.Pointer(&mem[0])) / pageSize * 8)
		if _, err := pm.ReadAt(ents, base); err != nil {
			return fmt.Errorf("save memory: read pagemap: %w", err)
		}
		present = func(p int) bool {
			e := binary.LittleEndian.Uint64(ents[8*p:])
			return e&(1<<63|1<<62) != 0 // present or swapped
		}
	}
	// Write runs of pages that hold data: present anonymous pages as they
	// are (scanning them for zeroes costs more than writing them), and
	// for file-backed RAM every non-zero page.
	pages := len(mem) / pageSize
	hasData := func(p int) bool {
		if present != nil {
			return present(p)
		}
		return !isZero(mem[p*pageSize : (p+1)*pageSize])
	}
	for p := 0; p < pages; {
		if !hasData(p) {
			p++
			continue
		}
		q := p + 1
		for q < pages && q-p < 1024 && hasData(q) {
			q++
		}
		if _, err := f.WriteAt(mem[p*pageSize:q*pageSize], int64(p*pageSize)); err != nil {
			return fmt.Errorf("save memory: %w", err)
		}
		p = q
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("save memory: %w", err)
	}
	return f.Close()
}

func isZero(b []byte) bool {
	for i := 0; i+8 <= len(b); i += 8 {
		if *(*uint64)(unsafe.Pointer(&b[i])) != 0 {
			return false
		}
	}
	return true
}

// SaveDir writes a paused machine's snapshot into dir (created if needed):
// StateFile and MemoryFile.
func (m *Machine) SaveDir(dir string) error {
	st, err := m.Save()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	if err := m.SaveMemory(filepath.Join(dir, MemoryFile)); err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	tmp := filepath.Join(dir, StateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, StateFile))
}

// LoadState reads dir/StateFile.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("load state %s: %w", dir, err)
	}
	return &st, nil
}
