package snapshot

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// Snapshot is one snapshot on disk, as Open or Write found it.
type Snapshot struct {
	Dir string
	Meta
	Sum [sumSize]byte // SHA-256 of meta: identifies the snapshot
	// Took is where Write's time went (nil from Open).
	Took Timing
	meta metaID // its meta file (Unchanged)
}

// Files inside a snapshot directory.
const (
	MetaFile = "meta"
	MemFile  = "mem"
	tmpMark  = ".tmp-"
)

// Write writes a snapshot at dir, atomically (see the package doc): the
// pages of mem (guest RAM, MemBytes long) in pages, and state. With a nil
// parent it is a full snapshot and pages must hold every page that has
// data; otherwise a delta over parent, which must live in the same store
// directory. dir must not exist.
func Write(dir string, mem []byte, pages Pages, parent *Snapshot, state []byte) (*Snapshot, error) {
	dir = filepath.Clean(dir)
	store, id := filepath.Dir(dir), filepath.Base(dir)
	m := &Meta{ID: id, MemBytes: uint64(len(mem)), State: state, Runs: pages.Runs(0), Version: Version}
	if parent != nil {
		if filepath.Dir(filepath.Clean(parent.Dir)) != store {
			return nil, msg.Errorf(syscall.EINVAL, "snapshot %s: parent %s is in another directory", msg.Cite(dir), msg.Cite(parent.Dir))
		}
		if parent.MemBytes != m.MemBytes {
			return nil, fmt.Errorf("snapshot %s: parent has %d bytes of memory, not %d: %w", msg.Cite(dir), parent.MemBytes, m.MemBytes, ErrWrongParent)
		}
		m.Parent, m.ParentSum = parent.ID, parent.Sum
	}
	if uint64(len(pages))*64 < m.MemBytes/PageSize {
		return nil, fmt.Errorf("snapshot %s: page set of %d pages for %d bytes", msg.Cite(dir), len(pages)*64, len(mem))
	}
	var off uint64
	for i := range m.Runs {
		r := &m.Runs[i]
		if (r.Page+r.Count)*PageSize > m.MemBytes {
			return nil, fmt.Errorf("snapshot %s: page %d is beyond memory", msg.Cite(dir), r.Page+r.Count-1)
		}
		if m.Full() {
			r.Offset = r.Page * PageSize
		} else {
			r.Offset = off
		}
		off += r.Count * PageSize
	}
	m.DataBytes = off
	if m.Full() {
		m.DataBytes = m.MemBytes
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", msg.Cite(dir), err)
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("snapshot %s: %w", msg.Cite(dir), ErrExist)
	}
	tmp, err := os.MkdirTemp(store, tmpMark+id+"-")
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", msg.Cite(dir), err)
	}
	s, err := writeTmp(tmp, dir, m, mem)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("snapshot %s: %w", msg.Cite(dir), err)
	}
	return s, nil
}

// writeTmp fills tmp, then renames it to dir and makes that durable.
// Both files are written and their writeback started before the first
// fsync, so one journal commit (on ext4 and the like) covers mem, meta
// and tmp's entries: the fsync of meta after it finds nothing left to
// commit. The rename is the second and last. (Each fsync of its own cost
// a commit: 50-120 ms in the lab, most of an idle pause to disk.)
func writeTmp(tmp, dir string, m *Meta, mem []byte) (*Snapshot, error) {
	var tm Timing
	t := Now()
	f, err := os.OpenFile(filepath.Join(tmp, MemFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(int64(m.DataBytes)); err != nil {
		return nil, err
	}
	tm.Mark("create", &t)
	if err := writeRuns(f, m.Runs, mem); err != nil {
		return nil, err
	}
	startWriteback(f)
	tm.Mark("data", &t)
	m.DataSum = sumRuns(m.Runs, mem)
	tm.Mark("sum", &t)
	b, sum := m.encode()
	tm.Mark("encode-meta", &t)
	mf, err := os.OpenFile(filepath.Join(tmp, MetaFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	if _, err := mf.Write(b); err != nil {
		return nil, err
	}
	startWriteback(mf)
	fi, err := mf.Stat()
	if err != nil {
		return nil, err
	}
	tm.Mark("write-meta", &t)
	for _, g := range []*os.File{f, mf} {
		if err := g.Sync(); err != nil {
			return nil, err
		}
		if err := g.Close(); err != nil {
			return nil, err
		}
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	tm.Mark("fsync", &t)
	if err := renameNoReplace(tmp, dir); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	tm.Mark("rename+fsync-store", &t)
	return &Snapshot{Dir: dir, Meta: *m, Sum: sum, Took: tm, meta: metaIDOf(fi)}, nil
}

// startWriteback starts writing f's dirty pages to its disk without
// waiting (sync_file_range WRITE): a hint, so that the fsyncs after it
// find them under way; an error here is left to those fsyncs.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

// maxIov is how many runs one pwritev takes (the kernel's UIO_MAXIOV).
const maxIov = 1024

// writeRuns writes each run's pages of mem at its offset in f. Runs
// whose data follow each other in f (all of a delta's; a full snapshot's
// adjacent ones) go out in one pwritev: a delta of a few hundred runs is
// a few system calls, not one per run.
func writeRuns(f *os.File, runs []Run, mem []byte) error {
	fd := int(f.Fd())
	for i := 0; i < len(runs); {
		off := runs[i].Offset
		var iov [][]byte
		end := off
		for ; i < len(runs) && runs[i].Offset == end && len(iov) < maxIov; i++ {
			r := runs[i]
			b := mem[r.Page*PageSize : (r.Page+r.Count)*PageSize]
			iov = append(iov, b)
			end += uint64(len(b))
		}
		for done := off; done < end; {
			n, err := unix.Pwritev(fd, iov, int64(done))
			if err == nil && n <= 0 {
				err = io.ErrShortWrite
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", msg.Cite(f.Name()), err)
			}
			done += uint64(n)
			iov = skipBytes(iov, n)
		}
	}
	return nil
}

// sumRuns is the CRC of the runs' pages of mem in run order (Version's:
// dataTable). writeTmp computes it after the data's writeback has
// started, so the disk writes while the CPU sums (mem does not change:
// the machine is paused). (Summing in another goroutine while writing
// was tried and was not faster in the lab: docs/snapshots.md.)
func sumRuns(runs []Run, mem []byte) uint32 {
	crc := uint32(0)
	for _, r := range runs {
		crc = crc32.Update(crc, ieee, mem[r.Page*PageSize:(r.Page+r.Count)*PageSize])
	}
	return crc
}

// skipBytes drops the first n bytes of iov (after a short pwritev).
func skipBytes(iov [][]byte, n int) [][]byte {
	for n > 0 && len(iov) > 0 {
		if n < len(iov[0]) {
			iov[0] = iov[0][n:]
			return iov
		}
		n -= len(iov[0])
		iov = iov[1:]
	}
	return iov
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// renameNoReplace renames a directory without replacing an existing one
// (a plain rename(2) would replace an empty directory).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		return ErrExist
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// A file system without RENAME_NOREPLACE: check, then rename (not
	// atomic against a concurrent writer of the same id).
	if _, err := os.Lstat(to); err == nil {
		return ErrExist
	}
	return os.Rename(from, to)
}
