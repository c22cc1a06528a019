package ctl

// The world registry's files: one directory per world under
// <stateDir>/worlds/, which appears whole (rename) or not at all.

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
)

// The world store:
//
//	<stateDir>/worlds/<w>/          root 0700  one world (a Plane.worlds entry)
//	  info.json                     its record (WorldInfo)
//	  upper/ work/ origins          the world's data (package world, docs/worlds.md)
//	<stateDir>/worlds/.tmp-<w>-*/   a world being created
//	<stateDir>/worlds/.rm-<w>-*     a world being removed
//
// Open removes the .tmp- and .rm- leftovers of a killed daemon.
const worldsName = "worlds"

// WorldInfo is one world as the registry knows it (its record).
type WorldInfo struct {
	Name    string     `json:"name"`
	Owner   cred.Owner `json:"owner"` // its creator
	Lower   string     `json:"lower"` // the host directory, absolute, without symbolic links
	Mode    string     `json:"mode"`  // overlay, readonly or unsafe-rw
	Created time.Time  `json:"created"`
}

// WorldModes are the modes of a world, the first the default.
var WorldModes = []string{"overlay", "readonly", "unsafe-rw"}

// Line is the first fields of the world's status, in this fixed order:
//
//	<w> mode=<mode> owner=<uid> created=<unix> lower=<path, Go-quoted if needed>
func (wi WorldInfo) Line() string {
	return fmt.Sprintf("%s mode=%s owner=%d created=%d lower=%s",
		wi.Name, wi.Mode, wi.Owner.UID, wi.Created.Unix(), quoteIfNeeded(wi.Lower))
}

func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, " \t\"\\") || fmt.Sprintf("%q", s) != `"`+s+`"` {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// validate checks a decoded record found in directory name.
func (wi *WorldInfo) validate(name string) error {
	switch {
	case !ValidName(wi.Name) || wi.Name != name:
		return fmt.Errorf("name %q does not match directory name", wi.Name)
	case !filepath.IsAbs(wi.Lower) || filepath.Clean(wi.Lower) != wi.Lower:
		return fmt.Errorf("lower %q is not a clean absolute path", wi.Lower)
	case !validMode(wi.Mode):
		return fmt.Errorf("invalid mode %q", wi.Mode)
	}
	return nil
}

func validMode(m string) bool {
	for _, v := range WorldModes {
		if m == v {
			return true
		}
	}
	return false
}

func (st *store) worldsDir() string { return filepath.Join(st.dir, worldsName) }

// worldDir is the directory of world name (Plane.World opens its data there).
func (st *store) worldDir(name string) string { return filepath.Join(st.worldsDir(), name) }

// loadWorlds reads every world record (loadRecordDirs).
func (st *store) loadWorlds(log *slog.Logger) (infos []WorldInfo, bad []string, err error) {
	return loadRecordDirs[WorldInfo](log, st.worldsDir(), snapInfo, "world", nil)
}

// worldCreate writes wi's record in a new directory and renames it into
// place: from here on the world is listed.
func (st *store) worldCreate(wi WorldInfo) error {
	tmp, err := os.MkdirTemp(st.worldsDir(), snapTmpMark+wi.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b, err := json.Marshal(wi)
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, wi.Name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, snapInfo), append(b, '\n')); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Rename(dir, st.worldDir(wi.Name)); err != nil {
		return err
	}
	return syncDir(st.worldsDir())
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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

// worldRemove deletes world name (removeRecordDir).
func (st *store) worldRemove(name string) error { return removeRecordDir(st.worldsDir(), name) }

// errNoWorld is the error for an unknown world name.
func errNoWorld(verb, name string) error {
	return Errorf(syscall.ENOENT, "%s: no world %s", verb, msg.Cite(name))
}
