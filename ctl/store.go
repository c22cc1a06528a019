package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// The state directory:
//
//	<stateDir>/lock                  flock(2)ed by the open Plane
//	<stateDir>/sandboxes/<id>.json   one record per sandbox (not in state new)
//	<stateDir>/sandboxes/.<id>.json.tmp*   a record being written (stale ones removed at Open)
//	<stateDir>/run/<id>/             the runtime's private directory (Spec.Dir)
const (
	lockName    = "lock"
	recordsName = "sandboxes"
	runName     = "run"
	tmpMarker   = ".json.tmp"
)

// recordFormat is the version of the record layout; Open skips (and
// logs) records of another format.
const recordFormat = 1

// record is the persisted form of one sandbox, e.g.
//
//	{"format":1,"id":"t1","owner":{"uid":1000,"gid":1000},"state":"running","template":"base",
//	 "mem":268435456,"cpus":1,"timeout_ns":0,"created":"2026-11-29T13:40:00Z"}
//
// owner came later within format 1: a record without it belongs to root.
type record struct {
	Format   int        `json:"format"`
	ID       string     `json:"id"`
	Owner    cred.Owner `json:"owner"`
	State    State      `json:"state"`
	Template string     `json:"template"`
	MemBytes uint64     `json:"mem"`
	CPUs     int        `json:"cpus"`
	World    string     `json:"world,omitempty"`
	Net      string     `json:"net,omitempty"`    // egress policy text (Config.Net)
	Group    string     `json:"group,omitempty"`  // Config.Group
	Member   string     `json:"member,omitempty"` // Config.Member
	Timeout  int64      `json:"timeout_ns"`
	Created  time.Time  `json:"created"`
	Deadline time.Time  `json:"deadline,omitzero"`
	Err      string     `json:"err,omitempty"`
	// UID is the host uid/gid the sandbox's machine runs as (Spec.UID),
	// held until rm: files in its run directory belong to it.
	UID int `json:"uid,omitempty"`
	// Disk is the image of a sandbox paused to disk (DiskPauser), or
	// resuming from it (state running); "" otherwise.
	Disk string `json:"disk_pause,omitempty"`
	// LastSnap is the snapshot its machine last took or was restored
	// from (the parent of its next snapshot: after a daemon restart too).
	LastSnap string `json:"last_snap,omitempty"`
	// Ports are the guest ports exposed to the host (net/ports), exposed
	// again on each new machine (netports.go).
	Ports []Exposure `json:"ports,omitempty"`
}

func (r *record) config() Config {
	return Config{Template: r.Template, MemBytes: r.MemBytes, CPUs: r.CPUs, World: r.World, Net: r.Net, Group: r.Group, Member: r.Member, Timeout: time.Duration(r.Timeout)}
}

// validate checks a decoded record; the text says what is wrong.
func (r *record) validate(file string) error {
	switch {
	case r.Format != recordFormat:
		return fmt.Errorf("format %d, want %d", r.Format, recordFormat)
	case !ValidName(r.ID) || r.ID+".json" != file:
		return fmt.Errorf("id %q does not match file name", r.ID)
	case !persistable(r.State):
		return fmt.Errorf("invalid state %q", r.State)
	case r.Template != "" && !ValidName(r.Template), r.World != "" && !ValidName(r.World):
		return fmt.Errorf("invalid template or world name")
	case len(r.Disk) > maxImageLen || strings.ContainsAny(r.Disk, "\n\x00") || (r.Disk != "" && r.State != StatePaused && r.State != StateRunning):
		return fmt.Errorf("invalid disk pause image")
	case r.LastSnap != "" && !ValidName(r.LastSnap) && !validBase(r.LastSnap):
		return fmt.Errorf("invalid last snapshot name")
	case !validExposures(r.Ports):
		return fmt.Errorf("invalid exposed ports")
	case r.Group != "" && !ValidName(r.Group), (r.Member != "") != (r.Group != ""):
		return fmt.Errorf("invalid group")
	case !validMember(r.Member):
		return fmt.Errorf("invalid group member address")
	case r.CPUs < 0 || r.CPUs > MaxCPUs || r.MemBytes > MaxMem || r.Timeout < 0 || r.UID < 0:
		return fmt.Errorf("settings out of range")
	}
	return nil
}

// persistable reports whether a record may hold state s.
func persistable(s State) bool {
	_, known := transitions[s]
	return known && s != StateNew && s != StateRemoved
}

// store is the on-disk side of a Plane. Its methods do I/O only; callers
// serialize writes of one record (Sandbox.op).
type store struct {
	dir  string
	lock *os.File
}

// openStore creates the layout under dir if needed and takes the lock.
func openStore(dir string) (*store, error) {
	// All 0700: a jailed VMM reaches its run directory's parts through
	// its own root (vmm/vmmproc/jail.go), never by these paths. (A state
	// directory from before the jail had dir and run/ at 0711.)
	for _, d := range []string{dir, filepath.Join(dir, recordsName), filepath.Join(dir, runName)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, Errorf(syscall.EIO, "open: %v", err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, runName)} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, Errorf(syscall.EIO, "open: %v", err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, Errorf(syscall.EIO, "open: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, Errorf(syscall.EBUSY, "open: state directory in use by another daemon %s", msg.Cite(dir))
		}
		return nil, Errorf(syscall.EIO, "open: lock %s: %v", msg.Cite(dir), err)
	}
	// Record our pid for people (the lock is the flock, not the content).
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	return &store{dir: dir, lock: f}, nil
}

// close releases the lock.
func (st *store) close() error {
	return st.lock.Close() // closing the last fd drops the flock
}

func (st *store) recordsDir() string { return filepath.Join(st.dir, recordsName) }

// runDir returns the runtime directory of sandbox id.
func (st *store) runDir(id string) string { return filepath.Join(st.dir, runName, id) }

// runDirOwners returns the owners other than root of what run/<id> holds
// (its first 10000 entries, symlinks not followed): the uid a sandbox
// whose record is unreadable ran as.
func (st *store) runDirOwners(id string) []int {
	seen := map[int]bool{}
	var out []int
	n := 0
	filepath.WalkDir(st.runDir(id), func(p string, d iofs.DirEntry, err error) error {
		if n++; err != nil || n > 10000 {
			return filepath.SkipAll
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && !seen[int(st.Uid)] {
				seen[int(st.Uid)] = true
				out = append(out, int(st.Uid))
			}
		}
		return nil
	})
	return out
}

// load reads every record. Stale temp files are removed; unreadable or
// invalid records are logged and skipped, and their ids returned in bad
// (when the file name is a valid id) so that nobody reuses them.
func (st *store) load(log *slog.Logger) (recs []record, bad []string, err error) {
	ents, err := os.ReadDir(st.recordsDir())
	if err != nil {
		return nil, nil, Errorf(syscall.EIO, "open: %v", err)
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(st.recordsDir(), name)
		if strings.HasPrefix(name, ".") && strings.Contains(name, tmpMarker) {
			// A write killed before its rename: the old record (if
			// any) is intact, this one never counted.
			log.Info("removing stale temporary record", "file", path)
			if err := os.Remove(path); err != nil {
				log.Warn("cannot remove stale temporary record", "file", path, "err", err)
			}
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || !e.Type().IsRegular() {
			log.Warn("ignoring unexpected file in state directory", "file", path)
			continue
		}
		r, err := readRecord[record](path, name)
		if err != nil {
			log.Error("skipping corrupt sandbox record (left in place)", "file", path, "err", err)
			if ValidName(id) {
				bad = append(bad, id)
			}
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, nil
}

// write stores r atomically: temp file, fsync, rename over the record,
// fsync the directory.
func (st *store) write(r record) error {
	r.Format = recordFormat
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := st.recordsDir()
	f, err := os.CreateTemp(dir, "."+r.ID+tmpMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, r.ID+".json"))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write record %s: %w", r.ID, err)
	}
	return syncDir(dir)
}

// remove deletes the record and the runtime directory of id.
func (st *store) remove(id string) error {
	err := os.Remove(filepath.Join(st.recordsDir(), id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err == nil {
		err = syncDir(st.recordsDir())
	}
	if rerr := os.RemoveAll(st.runDir(id)); err == nil {
		err = rerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
