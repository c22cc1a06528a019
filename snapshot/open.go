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
	"syscall"

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
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", msg.Cite(dir), err)
	}
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
	return &Snapshot{Dir: dir, Meta: *m, Sum: sum, meta: metaIDOf(fi)}, nil
}

// metaID identifies a meta file. A snapshot is never rewritten in place
// (Write renames a new directory in), so a meta with the same device,
// inode, size and mtime is the same meta; a chown or chmod (the daemon's
// import of a VMM's snapshot) changes none of them.
type metaID struct {
	dev, ino uint64
	size     int64
	mtime    syscall.Timespec
}

// metaIDOf is fi's metaID (zero if fi is not from a stat(2)).
func metaIDOf(fi fs.FileInfo) metaID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return metaID{}
	}
	return metaID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim}
}

// Unchanged reports whether the snapshot at dir is s, as Open or Write
// found it, with one stat of its meta instead of Open's read and
// checksum. False means "not known to be": Open it to compare Sums.
func (s *Snapshot) Unchanged(dir string) bool {
	if s.meta == (metaID{}) {
		return false
	}
	fi, err := os.Lstat(filepath.Join(dir, MetaFile))
	return err == nil && fi.Mode().IsRegular() && metaIDOf(fi) == s.meta
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
