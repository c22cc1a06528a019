package snapshot

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sandfs/ctl/msg"
)

// Open reads and checks the snapshot at dir: its meta (bounded, checksum,
// version, runs), that its id is dir's name, and that mem has the size
// meta gives. The data itself is checked by Verify.
func Open(dir string) (*Snapshot, error) {
	dir = filepath.Clean(dir)
	f, err := os.Open(filepath.Join(dir, MetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxMeta+1))
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), err)
	}
	if len(b) > MaxMeta {
		return nil, fmt.Errorf("open snapshot %s: meta over %d bytes: %w", msg.Cite(dir), MaxMeta, ErrCorrupt)
	}
	m, sum, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), err)
	}
	if m.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("open snapshot %s: it names itself %s: %w", msg.Cite(dir), msg.Cite(m.ID), ErrCorrupt)
	}
	st, err := os.Stat(filepath.Join(dir, MemFile))
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), err)
	}
	if uint64(st.Size()) != m.DataBytes {
		return nil, fmt.Errorf("open snapshot %s: mem is %d bytes, want %d: %w", msg.Cite(dir), st.Size(), m.DataBytes, ErrCorrupt)
	}
	return &Snapshot{Dir: dir, Meta: *m, Sum: sum}, nil
}

// Chain opens the snapshot at dir and its ancestors (siblings in the same
// store, each matching the Sum its child recorded), full snapshot first.
func Chain(dir string) ([]*Snapshot, error) {
	s, err := Open(dir)
	if err != nil {
		return nil, err
	}
	chain := []*Snapshot{s}
	for !s.Full() {
		if len(chain) >= MaxDepth {
			return nil, fmt.Errorf("open chain %s: over %d snapshots: %w", msg.Cite(dir), MaxDepth, ErrCorrupt)
		}
		p, err := Open(filepath.Join(filepath.Dir(s.Dir), s.Parent))
		if err != nil {
			return nil, fmt.Errorf("open chain %s: %w", msg.Cite(dir), err)
		}
		if p.Sum != s.ParentSum || p.MemBytes != s.MemBytes {
			return nil, fmt.Errorf("open chain %s: %s is not the parent %s was taken over: %w",
				msg.Cite(dir), msg.Cite(p.ID), msg.Cite(s.ID), ErrWrongParent)
		}
		chain = append(chain, p)
		s = p
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// Verify reads s's data and checks it against its CRC.
func Verify(s *Snapshot) error {
	f, err := os.Open(filepath.Join(s.Dir, MemFile))
	if err != nil {
		return fmt.Errorf("verify snapshot %s: %w", msg.Cite(s.Dir), err)
	}
	defer f.Close()
	crc := crc32.New(dataTable(s.Version))
	for _, r := range s.Runs {
		if _, err := io.Copy(crc, io.NewSectionReader(f, int64(r.Offset), int64(r.Count*PageSize))); err != nil {
			return fmt.Errorf("verify snapshot %s: %w", msg.Cite(s.Dir), err)
		}
	}
	if crc.Sum32() != s.DataSum {
		return fmt.Errorf("verify snapshot %s: data checksum mismatch: %w", msg.Cite(s.Dir), ErrCorrupt)
	}
	return nil
}

// List returns the ids of the snapshots in store that Open accepts,
// sorted; entries being written (".tmp-*") and broken ones are skipped.
func List(store string) ([]string, error) {
	ents, err := os.ReadDir(store)
	if err != nil {
		return nil, fmt.Errorf("list snapshots %s: %w", msg.Cite(store), err)
	}
	var ids []string
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if _, err := Open(filepath.Join(store, e.Name())); err == nil {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Clean removes what interrupted writes left in store (".tmp-*"). Only
// when no Write into store is running.
func Clean(store string) error {
	ents, err := os.ReadDir(store)
	if err != nil {
		return fmt.Errorf("clean snapshots %s: %w", msg.Cite(store), err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpMark) {
			if err := os.RemoveAll(filepath.Join(store, e.Name())); err != nil {
				return fmt.Errorf("clean snapshots %s: %w", msg.Cite(store), err)
			}
		}
	}
	return nil
}
