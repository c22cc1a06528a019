package vmmproc

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sandfs/vmm/cgroup"
)

// spareGroupPrefix begins the name of a spare's cgroup, and so of the
// cgroup of each sandbox whose VMM was a spare: <parent>/vmm-<12 hex>.
const spareGroupPrefix = "vmm-"

// spareLimits bound a spare until a launch gives it its sandbox's: a
// waiting spare is the Go runtime and little else.
var spareLimits = cgroup.Limits{MemBytes: 128 << 20, CPUPercent: 100, Pids: 64}

// spareGroups makes the spares' cgroups under parent, in the host's
// layout, detected once (NewSpares). Its zero value makes none: no
// parent, or cgroups that are not v2 (only v2 starts a process in its
// group, CLONE_INTO_CGROUP); launches then make and join their groups as
// without spares.
type spareGroups struct {
	layout cgroup.Layout
	parent string // "": none
}

func newSpareGroups(parent string) spareGroups {
	if parent == "" {
		return spareGroups{}
	}
	l, err := cgroup.Detect()
	if err != nil || l.Mode != cgroup.V2 {
		return spareGroups{}
	}
	return spareGroups{layout: l, parent: parent}
}

// make makes the group of one spare, or returns nil (the zero value).
func (g spareGroups) make() (*cgroup.Group, error) {
	if g.parent == "" {
		return nil, nil
	}
	var b [6]byte
	rand.Read(b[:])
	return g.layout.Create(g.parent+"/"+spareGroupPrefix+hex.EncodeToString(b[:]), spareLimits)
}

// staleAfter is how old an empty spare-named group must be before
// removeStale takes it for a leftover: a launcher makes one and clones
// into it within a moment (another launcher's may be between the two).
const staleAfter = time.Minute

// removeStale removes the empty spare-named groups under the parent that
// a launcher which ended left (its spares end with it, and a sandbox's
// VMM that ended while no daemon ran leaves its group empty). A group
// with a process in it, a spare's or a sandbox's, is not removed (rmdir
// fails with EBUSY).
func (g spareGroups) removeStale() {
	if g.parent == "" {
		return
	}
	dir := filepath.Join(g.layout.V2, g.parent)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spareGroupPrefix) {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < staleAfter {
			continue
		}
		syscall.Rmdir(filepath.Join(dir, e.Name()))
	}
}
