package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Mode is the cgroup version a Layout uses; its text is what the daemon
// shows as limits=<mode> in a sandbox's status.
type Mode string

const (
	V2   Mode = "cgroup2" // one cgroup2 directory, entered with CLONE_INTO_CGROUP
	V1   Mode = "cgroup1" // one directory per v1 hierarchy, entered by pid
	None Mode = "none"    // no usable controllers: no limits
)

// Needed are the controllers Limits use, in the order Layout.V1 is walked.
var Needed = []string{"memory", "pids", "cpu"}

// Layout is where limited groups are made on a host.
type Layout struct {
	Mode Mode
	V2   string            // Mode V2: the cgroup2 mount point
	V1   map[string]string // Mode V1: controller (each of Needed) → its hierarchy's mount point
	Why  string            // Mode None: what is missing, e.g. "no cgroup file system is mounted"
}

// String describes the layout in one line, for logs.
func (l Layout) String() string {
	switch l.Mode {
	case V2:
		return fmt.Sprintf("cgroup2 at %s", l.V2)
	case V1:
		var s []string
		for _, c := range Needed {
			s = append(s, c+" at "+l.V1[c])
		}
		return "cgroup1 (" + strings.Join(s, ", ") + ")"
	}
	return "none: " + l.Why
}

// Decide chooses the layout for a mount table whose cgroup2 entries have
// their Controllers filled in: the first writable cgroup2 mount that
// offers all of Needed; else, for each of Needed, the first writable v1
// hierarchy that holds it; else None, with what each candidate lacked.
func Decide(mounts []Mount) Layout {
	var why []string
	for _, m := range mounts {
		if m.Version != 2 {
			continue
		}
		if missing := lacks(m.Controllers); m.ReadOnly {
			why = append(why, fmt.Sprintf("cgroup2 at %s is read-only", m.Point))
		} else if len(missing) > 0 {
			why = append(why, fmt.Sprintf("cgroup2 at %s offers no %s controller", m.Point, strings.Join(missing, ", ")))
		} else {
			return Layout{Mode: V2, V2: m.Point}
		}
	}
	v1 := map[string]string{}
	var missing []string
	for _, c := range Needed {
		ro := ""
		for _, m := range mounts {
			if m.Version != 1 || !slices.Contains(m.Controllers, c) {
				continue
			}
			if m.ReadOnly {
				ro = m.Point
				continue
			}
			v1[c] = m.Point
			break
		}
		switch {
		case v1[c] != "":
		case ro != "":
			why = append(why, fmt.Sprintf("cgroup v1 %s at %s is read-only", c, ro))
		default:
			missing = append(missing, c)
		}
	}
	if len(v1) == len(Needed) {
		return Layout{Mode: V1, V1: v1}
	}
	if len(mounts) == 0 {
		return Layout{Mode: None, Why: "no cgroup file system is mounted"}
	}
	if len(missing) > 0 {
		why = append(why, "no cgroup v1 hierarchy for "+strings.Join(missing, ", "))
	}
	return Layout{Mode: None, Why: strings.Join(why, "; ")}
}

// lacks returns the controllers of Needed not in have.
func lacks(have []string) []string {
	var out []string
	for _, c := range Needed {
		if !slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

// Detect decides the layout of this process's mount namespace: it reads
// /proc/self/mountinfo and each cgroup2 mount's cgroup.controllers (an
// unreadable one counts as offering nothing).
func Detect() (Layout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Layout{}, fmt.Errorf("cgroup: %w", err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		return Layout{}, fmt.Errorf("cgroup: %w", err)
	}
	for i, m := range mounts {
		if m.Version == 2 {
			b, _ := os.ReadFile(filepath.Join(m.Point, "cgroup.controllers"))
			mounts[i].Controllers = strings.Fields(string(b))
		}
	}
	return Decide(mounts), nil
}
