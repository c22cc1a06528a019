package ctl

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"sandfs/vmm/cgroup"
)

// TestNewVMMRuntimeLimits: the runtime asks for a cgroup exactly when it
// is root on a host with usable controllers, and otherwise warns once,
// with the reason, that VMMs run without limits.
func TestNewVMMRuntimeLimits(t *testing.T) {
	v1 := cgroup.Layout{Mode: cgroup.V1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu"}}
	v2 := cgroup.Layout{Mode: cgroup.V2, V2: "/sys/fs/cgroup"}
	none := cgroup.Layout{Mode: cgroup.None, Why: "no cgroup file system is mounted"}
	for _, tc := range []struct {
		name   string
		root   bool
		layout cgroup.Layout
		err    error
		parent string // want CgroupParent
		log    string // want in the log
		warn   bool   // want one warning
	}{
		{"root, v2", true, v2, nil, "sandfs", "cgroup=\"cgroup2 at /sys/fs/cgroup\"", false},
		{"root, hybrid", true, v1, nil, "sandfs", "cgroup1 (memory at /sys/fs/cgroup/memory", false},
		{"root, none", true, none, nil, "", "no usable cgroup controllers: no cgroup file system is mounted", true},
		{"root, no mountinfo", true, cgroup.Layout{}, errors.New("cgroup: open /proc/self/mountinfo: no such file"), "", "open /proc/self/mountinfo", true},
		{"not root", false, v2, nil, "", "not root", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			detect := func() (cgroup.Layout, error) { return tc.layout, tc.err }
			r := newVMMRuntime("k", "t", log, tc.root, detect)
			if r.CgroupParent != tc.parent {
				t.Errorf("CgroupParent = %q; want %q", r.CgroupParent, tc.parent)
			}
			if r.Jail.Namespaces != tc.root || r.Jail.Seccomp != tc.root || r.Jailed != tc.root || (r.IDs() == DefaultVMMIDs) != tc.root {
				t.Errorf("Jail = %+v, Jailed %v, IDs %v; want namespaces, seccomp, the jail and uids from DefaultVMMIDs iff root", r.Jail, r.Jailed, r.IDs())
			}
			out := buf.String()
			if !strings.Contains(out, tc.log) {
				t.Errorf("log %q; want %q", out, tc.log)
			}
			warns := strings.Count(out, "level=WARN")
			if tc.warn && (warns != 1 || !strings.Contains(out, "limits=none")) {
				t.Errorf("log %q; want one warning naming limits=none", out)
			}
			if !tc.warn && warns != 0 {
				t.Errorf("log %q; want no warning", out)
			}
		})
	}
}
