package ctl

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// validator is a record read back from the state directory, which checks
// itself against the name it was found under.
type validator[T any] interface {
	*T
	validate(name string) error
}

// readRecord reads the JSON record at path and validates it against name.
func readRecord[T any, P validator[T]](path, name string) (T, error) {
	var v T
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err == nil {
		err = P(&v).validate(name)
	}
	return v, err
}

// loadRecordDirs reads the records of dir's subdirectories (what names
// them in logs: "snapshot", "world"), each <dir>/<name>/<file>. The
// leftovers of interrupted writes and removals (names starting with
// snapTmpMark or snapGoneMark) are removed; names for which skip says so
// are passed over; corrupt records are logged and skipped (left in
// place), their names returned in bad when valid, so nobody reuses them.
func loadRecordDirs[T any, P validator[T]](log *slog.Logger, dir, file, what string, skip func(name string) bool) (recs []T, bad []string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, Errorf(syscall.EIO, "open: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, Errorf(syscall.EIO, "open: %v", err)
	}
	for _, e := range ents {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		if skip != nil && skip(name) {
			continue
		}
		if strings.HasPrefix(name, snapTmpMark) || strings.HasPrefix(name, snapGoneMark) {
			log.Info("removing an interrupted "+what+" write or removal", "dir", path)
			if err := os.RemoveAll(path); err != nil {
				log.Warn("cannot remove", "dir", path, "err", err)
			}
			continue
		}
		v, err := readRecord[T, P](filepath.Join(path, file), name)
		if err != nil {
			log.Error("skipping corrupt "+what+" (left in place)", "dir", path, "err", err)
			if ValidName(name) {
				bad = append(bad, name)
			}
			continue
		}
		recs = append(recs, v)
	}
	return recs, bad, nil
}

// removeRecordDir deletes dir/name: renamed away first (it disappears at
// once, also for a daemon killed during the removal; loadRecordDirs
// finishes the job), then removed.
func removeRecordDir(dir, name string) error {
	gone, err := os.MkdirTemp(dir, snapGoneMark+name+"-")
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, name), filepath.Join(gone, name)); err != nil {
		os.Remove(gone)
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}
