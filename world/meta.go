package world

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// ident is what apply compares to tell whether the lower changed at a
// path: a file rewritten in place changes its size, mtime or ctime; one
// replaced by a rename changes its inode.
type ident struct {
	Size, Mtime, Ctime int64 // ns
	Ino                uint64
	Mode               uint32
}

func identOf(st *unix.Stat_t) ident {
	return ident{Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Mode: st.Mode}
}

// meta is the world's origins file: an append-only log, one record a
// line, the last record of a key winning; Open and Apply rewrite it
// whole (a new file renamed into place).
//
//	b <size> <mtime> <ctime> <ino> <mode> <path>   base of path (Go-quoted)
//	-b <path>                                       path has no base
//	i <upper ino> <lower ino>                       a copied-up file's lower inode
//	-i <upper ino>
//
// A torn last line (a kill during an append) is ignored.
type meta struct {
	path string

	mu   sync.Mutex        // a leaf
	f    *os.File          // open for appending; guarded by mu
	base map[string]ident  // guarded by mu
	inos map[uint64]uint64 // guarded by mu
}

// openMeta reads the origins file at path and rewrites it with the
// bases of the paths keep reports (others are stale).
func openMeta(path string, keep func(string) bool) (*meta, error) {
	m, err := loadMeta(path)
	if err != nil {
		return nil, err
	}
	for p := range m.base {
		if !keep(p) {
			delete(m.base, p)
		}
	}
	return m, m.rewrite()
}

// loadMeta reads the origins file at path (none: empty origins); the
// result is not open for appending.
func loadMeta(path string) (*meta, error) {
	m := &meta{path: path, base: map[string]ident{}, inos: map[uint64]uint64{}}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		if err := m.replay(sc.Text()); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// replay applies one record.
func (m *meta) replay(line string) error {
	var (
		id   ident
		q    string
		u, l uint64
	)
	bad := fmt.Errorf("bad record %q", line)
	switch {
	case len(line) > 2 && line[:2] == "b ":
		if _, err := fmt.Sscanf(line, "b %d %d %d %d %d %s", &id.Size, &id.Mtime, &id.Ctime, &id.Ino, &id.Mode, &q); err != nil {
			return bad
		}
		p, err := strconv.Unquote(line[len(line)-len(lastField(line)):])
		if err != nil {
			return bad
		}
		m.base[p] = id
	case len(line) > 3 && line[:3] == "-b ":
		p, err := strconv.Unquote(line[3:])
		if err != nil {
			return bad
		}
		delete(m.base, p)
	case len(line) > 2 && line[:2] == "i ":
		if _, err := fmt.Sscanf(line, "i %d %d", &u, &l); err != nil {
			return bad
		}
		m.inos[u] = l
	case len(line) > 3 && line[:3] == "-i ":
		if _, err := fmt.Sscanf(line, "-i %d", &u); err != nil {
			return bad
		}
		delete(m.inos, u)
	default:
		return bad
	}
	return nil
}

// lastField is the quoted path ending a "b" record (it may hold blanks).
func lastField(line string) string {
	n := 0
	for i := range line {
		if line[i] == ' ' {
			if n++; n == 6 {
				return line[i+1:]
			}
		}
	}
	return ""
}

func baseRecord(p string, id ident) string {
	return fmt.Sprintf("b %d %d %d %d %d %s\n", id.Size, id.Mtime, id.Ctime, id.Ino, id.Mode, strconv.Quote(p))
}

// rewrite writes the whole state to a new file and renames it into place.
func (m *meta) rewrite() error {
	tmp := m.path + ".new"
	if err := writeSync(tmp, encodeMeta(m.base, m.inos)); err != nil {
		return err
	}
	return m.install(tmp)
}

// adopt makes base and inos the state, from file, their encoding
// already written and synced (a Restore's journal), renamed into place.
func (m *meta) adopt(file string, base map[string]ident, inos map[uint64]uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base, m.inos = base, inos
	return m.install(file)
}

// install renames file, the state's encoding, into place and opens it
// for appending. mu held.
func (m *meta) install(file string) error {
	if err := os.Rename(file, m.path); err != nil {
		return err
	}
	if m.f != nil {
		m.f.Close()
	}
	var err error
	m.f, err = os.OpenFile(m.path, os.O_WRONLY|os.O_APPEND, 0)
	return err
}

// encodeMeta is the origins file of base and inos.
func encodeMeta(base map[string]ident, inos map[uint64]uint64) []byte {
	var b bytes.Buffer
	for p, id := range base {
		b.WriteString(baseRecord(p, id))
	}
	for u, l := range inos {
		fmt.Fprintf(&b, "i %d %d\n", u, l)
	}
	return b.Bytes()
}

func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// newMemMeta is the origins of a world without upper (UnsafeRW): kept
// in memory only.
func newMemMeta() *meta {
	return &meta{base: map[string]ident{}, inos: map[uint64]uint64{}}
}

// log appends a record. Called with mu held.
func (m *meta) log(rec string) error {
	if m.path == "" {
		return nil
	}
	_, err := m.f.WriteString(rec)
	return err
}

// setBase records id as path's base unless it has one.
func (m *meta) setBase(path string, id ident) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.base[path]; ok {
		return nil
	}
	m.base[path] = id
	return m.log(baseRecord(path, id))
}

// getBase returns path's base.
func (m *meta) getBase(path string) (ident, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.base[path]
	return id, ok
}

// dropBase forgets path's base.
func (m *meta) dropBase(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.base[path]; !ok {
		return nil
	}
	delete(m.base, path)
	return m.log("-b " + strconv.Quote(path) + "\n")
}

// setIno records that the upper file upper was copied up from the
// lower's lower.
func (m *meta) setIno(upper, lower uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inos[upper] = lower
	return m.log(fmt.Sprintf("i %d %d\n", upper, lower))
}

// dropIno forgets upper's lower inode (its last link is gone).
func (m *meta) dropIno(upper uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.inos[upper]; !ok {
		return nil
	}
	delete(m.inos, upper)
	return m.log(fmt.Sprintf("-i %d\n", upper))
}

func (m *meta) lowerIno(upper uint64) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.inos[upper]
	return l, ok
}

// reset forgets everything (after Discard, or an Apply that emptied the
// upper).
func (m *meta) reset() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base, m.inos = map[string]ident{}, map[uint64]uint64{}
	if m.path == "" {
		return nil
	}
	return m.rewrite()
}

// state returns copies of the bases and the copied-up files' inodes.
func (m *meta) state() (map[string]ident, map[uint64]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.base), maps.Clone(m.inos)
}

func (m *meta) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	return m.f.Close()
}
