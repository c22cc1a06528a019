package ctl

// The snapshot registry's files: one directory per snapshot under
// <stateDir>/snapshots/, which appears whole (rename) or not at all.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
	"sandfs/snapshot"
)

// The snapshot store:
//
//	<stateDir>/snapshots/<snap>/            root 0700  one snapshot (a Plane.snaps entry)
//	  info.json                             its record (snapRecord)
//	  ...                                   what the runtime wrote (Snapshotter):
//	                                        for the VMM meta, mem, rootfs.cow(.map)
//	<stateDir>/snapshots/.tmp-<snap>-*/     a snapshot being written (<snap>/ inside)
//	<stateDir>/snapshots/.rm-<snap>-*       a snapshot being removed
//	<stateDir>/snapshots/_<template entry>/  a template's snapshot (meta, mem,
//	                                        links of its cache entry's): the
//	                                        parent of the first snapshot of a
//	                                        sandbox restored from it; not listed
//
// A snapshot is taken into .tmp-<snap>-*/<snap>/ (the runtime's files, then
// info.json), synced, then renamed to snapshots/<snap>: it is complete and
// listed, or absent. Open removes the .tmp- and .rm- leftovers of a
// killed daemon. Every snapshot is a sibling of its parent, so the
// directory is also a store of package snapshot (Chain works in it).
const (
	snapsName    = "snapshots"
	snapInfo     = "info.json"
	snapTmpMark  = ".tmp-"
	snapGoneMark = ".rm-"
	snapBaseMark = "_"
)

// SnapshotInfo is one snapshot as the registry knows it (its record).
type SnapshotInfo struct {
	ID      string     `json:"id"`
	Sandbox string     `json:"sandbox"`          // the sandbox it was taken of (which may be gone)
	Parent  string     `json:"parent,omitempty"` // the snapshot a delta is over, "" for a full one
	Owner   cred.Owner `json:"owner"`            // the sandbox's owner
	Created time.Time  `json:"created"`
	Full    bool       `json:"full"`
	// MemBytes is guest RAM (the sandbox's mem); DataBytes the memory
	// this snapshot holds, its pages × 4096 (a delta: the pages dirtied
	// since its parent); DiskBytes the space allocated to its frozen
	// disk layer (st_blocks: reflinked extents count in full).
	MemBytes  uint64 `json:"mem"`
	DataBytes uint64 `json:"data"`
	DiskBytes uint64 `json:"disk"`
	// Template and CPUs complete the machine's shape (with MemBytes),
	// which a restore repeats.
	Template string `json:"template"`
	CPUs     int    `json:"cpus"`
	// Boot is the runtime's note of how the machine was made, which a
	// restore needs (the VMM: the host name on its kernel command line).
	Boot string `json:"boot,omitempty"`
	// Removed: rm'ed while snapshots over it (deltas) still need it. It
	// is no longer listed, looked up or restored by name; its files stay
	// until the last snapshot over it is removed (retention.go).
	Removed bool `json:"removed,omitempty"`
}

// Line is the snapshot's info file, one line without newline, fields in
// this fixed order (new fields only ever at the end):
//
//	<id> sandbox=<id> parent=<snap|-> created=<unix> mem=<bytes> data=<bytes> disk=<bytes> kind=<full|delta>
func (si SnapshotInfo) Line() string {
	parent, kind := si.Parent, "delta"
	if parent == "" {
		parent = "-"
	}
	if si.Full {
		kind = "full"
	}
	return fmt.Sprintf("%s sandbox=%s parent=%s created=%d mem=%d data=%d disk=%d kind=%s",
		si.ID, si.Sandbox, parent, si.Created.Unix(), si.MemBytes, si.DataBytes, si.DiskBytes, kind)
}

// validate checks a decoded record found in directory name.
func (si *SnapshotInfo) validate(name string) error {
	switch {
	case !ValidName(si.ID) || si.ID != name:
		return fmt.Errorf("id %q does not match directory name", si.ID)
	case !ValidName(si.Sandbox), si.Parent != "" && !ValidName(si.Parent) && !validBase(si.Parent), si.Full != (si.Parent == ""):
		return fmt.Errorf("invalid sandbox or parent")
	case si.Template != "" && !ValidName(si.Template), si.CPUs < 0 || si.CPUs > MaxCPUs, si.MemBytes > MaxMem:
		return fmt.Errorf("invalid shape")
	}
	return nil
}

// validBase reports whether id names a template's snapshot: "_" and a
// template cache key.
func validBase(id string) bool {
	return strings.HasPrefix(id, snapBaseMark) && len(id) <= 200 && !strings.ContainsAny(id, "/\x00") && !strings.HasPrefix(id, snapBaseMark+".")
}

// snapBase makes <snapshots>/<name of dir> (dir: a template's snapshot)
// a sibling of the snapshots over it, once: links of its meta and mem,
// written whole then renamed.
func (st *store) snapBase(dir string) error {
	id := filepath.Base(dir)
	if !validBase(id) {
		return fmt.Errorf("bad template snapshot name %q", id)
	}
	final := st.snapDir(id)
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	d, err := st.snapTemp(id)
	if err != nil {
		return err
	}
	defer st.snapDrop(d)
	for _, f := range []string{snapshot.MetaFile, snapshot.MemFile} {
		if err := os.Link(filepath.Join(dir, f), filepath.Join(d, f)); err != nil {
			return err
		}
	}
	if err := syncTree(filepath.Dir(d)); err != nil {
		return err
	}
	if err := os.Rename(d, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another snapshot kept it meanwhile
		}
		return err
	}
	return syncDir(st.snapsDir())
}

func (st *store) snapsDir() string { return filepath.Join(st.dir, snapsName) }

// snapDir is the directory of snapshot id.
func (st *store) snapDir(id string) string { return filepath.Join(st.snapsDir(), id) }

// loadSnaps reads every snapshot record (loadRecordDirs); a template's
// snapshot (snapBase) is not one.
func (st *store) loadSnaps(log *slog.Logger) (infos []SnapshotInfo, bad []string, err error) {
	return loadRecordDirs[SnapshotInfo](log, st.snapsDir(), snapInfo, "snapshot",
		func(name string) bool { return strings.HasPrefix(name, snapBaseMark) })
}

// snapTemp makes the directory a snapshot id is written in,
// .tmp-<id>-*/<id>, and returns it.
func (st *store) snapTemp(id string) (string, error) {
	tmp, err := os.MkdirTemp(st.snapsDir(), snapTmpMark+id+"-")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tmp, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return dir, nil
}

// snapCommit writes si's record into dir (from snapTemp), syncs the
// snapshot and renames it into place: from here on it is listed.
func (st *store) snapCommit(dir string, si SnapshotInfo) error {
	b, err := json.Marshal(si)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, snapInfo), append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := syncTree(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Rename(dir, st.snapDir(si.ID)); err != nil {
		return err
	}
	os.Remove(filepath.Dir(dir))
	return syncDir(st.snapsDir())
}

// snapRewrite replaces the record of listed snapshot si (info.json):
// written beside it, synced, renamed over it, the directory synced.
func (st *store) snapRewrite(si SnapshotInfo) error {
	b, err := json.Marshal(si)
	if err != nil {
		return err
	}
	dir := st.snapDir(si.ID)
	tmp := filepath.Join(dir, snapInfo+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, snapInfo))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// snapDrop removes a snapshot directory left by a failed write (from
// snapTemp).
func (st *store) snapDrop(dir string) {
	os.RemoveAll(filepath.Dir(dir))
}

// snapRemove deletes snapshot id (removeRecordDir).
func (st *store) snapRemove(id string) error { return removeRecordDir(st.snapsDir(), id) }

// errNoSnapshot is the error for an unknown snapshot name.
func errNoSnapshot(verb, id string) error {
	return Errorf(syscall.ENOENT, "%s: no snapshot %s", verb, msg.Cite(id))
}
