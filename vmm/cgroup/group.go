package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are what a Group enforces.
type Limits struct {
	MemBytes   uint64 // memory.max (v1: memory.limit_in_bytes)
	CPUPercent int    // CPU time in percent of one CPU, per CPUPeriod (cpu.max; v1: cpu.cfs_quota_us)
	Pids       int    // tasks (threads included): pids.max
}

// CPUPeriod is the CPU bandwidth period in microseconds (the kernel's
// default, 100 ms).
const CPUPeriod = 100000

// Group is a cgroup made by Layout.Create: one directory in v2, one per
// hierarchy in v1.
type Group struct {
	Mode Mode
	Name string   // as given to Create, e.g. "sandfs/t1"
	Dirs []string // the leaf directories, one per hierarchy
	fd   int      // V2: the leaf opened O_DIRECTORY for CLONE_INTO_CGROUP; -1 once closed or in V1
	// ctl is the leaf that holds each controller of Needed.
	ctl map[string]string
}

// Create makes the group name (a relative path such as "sandfs/t1")
// with lim in every hierarchy of l. The leaf must not exist yet. On error
// nothing it created is left but parent directories.
func (l Layout) Create(name string, lim Limits) (*Group, error) {
	if !filepath.IsLocal(name) || filepath.Clean(name) != name {
		return nil, fmt.Errorf("cgroup: bad name %q", name)
	}
	g := &Group{Mode: l.Mode, Name: name, fd: -1, ctl: map[string]string{}}
	var err error
	switch l.Mode {
	case V2:
		err = g.create2(l.V2, lim)
	case V1:
		err = g.create1(l.V1, lim)
	default:
		return nil, fmt.Errorf("cgroup: create %q: no usable controllers (%s)", name, l.Why)
	}
	if err != nil {
		g.Remove()
		return nil, err
	}
	return g, nil
}

// Existing is the group name (as given to Create) that a Create before
// made, maybe in another process (a daemon that started a VMM before a
// restart): for Remove, Mode and Dirs; its FD is -1. The directories are
// not checked: Remove skips those that are gone.
func (l Layout) Existing(name string) (*Group, error) {
	if !filepath.IsLocal(name) || filepath.Clean(name) != name {
		return nil, fmt.Errorf("cgroup: bad name %q", name)
	}
	g := &Group{Mode: l.Mode, Name: name, fd: -1, ctl: map[string]string{}}
	switch l.Mode {
	case V2:
		g.Dirs = []string{filepath.Join(l.V2, name)}
		for _, c := range Needed {
			g.ctl[c] = g.Dirs[0]
		}
	case V1:
		seen := map[string]bool{}
		for _, c := range Needed {
			mnt := l.V1[c]
			if !seen[mnt] {
				seen[mnt] = true
				g.Dirs = append(g.Dirs, filepath.Join(mnt, name))
			}
			g.ctl[c] = filepath.Join(mnt, name)
		}
	default:
		return nil, fmt.Errorf("cgroup: group %q: no usable controllers (%s)", name, l.Why)
	}
	return g, nil
}

// create2 enables the controllers down the path from the mount point (a
// parent of the leaf holds no processes, so the no-internal-process rule
// allows it), makes the leaf, writes the limits and opens the leaf.
func (g *Group) create2(mnt string, lim Limits) error {
	dir := mnt
	parts := strings.Split(g.Name, "/")
	for i, part := range parts {
		if err := write(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids +cpu"); err != nil {
			return err
		}
		dir = filepath.Join(dir, part)
		last := i == len(parts)-1
		if err := os.Mkdir(dir, 0o755); err != nil && !(os.IsExist(err) && !last) {
			return fmt.Errorf("cgroup: %w", err)
		}
		if last {
			g.Dirs = append(g.Dirs, dir)
		}
	}
	for _, c := range Needed {
		g.ctl[c] = dir
	}
	if err := g.SetLimits(lim); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup: open %s: %w", dir, err)
	}
	g.fd = fd
	return nil
}

// create1 makes the leaf in each hierarchy of hier (controller → mount
// point; co-mounted controllers share one directory) and writes each
// controller's limits into it.
func (g *Group) create1(hier map[string]string, lim Limits) error {
	dirs := map[string]string{} // mount point → leaf
	for _, c := range Needed {
		mnt := hier[c]
		dir, ok := dirs[mnt]
		if !ok {
			dir = filepath.Join(mnt, g.Name)
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
			dirs[mnt] = dir
			g.Dirs = append(g.Dirs, dir)
		}
		g.ctl[c] = dir
	}
	return g.SetLimits(lim)
}

// SetLimits writes lim into the group's files, in place of what Create
// (or an earlier SetLimits) wrote: a group made ahead for a process not
// yet known (vmmproc's spare VMMs) gets its limits when it is.
func (g *Group) SetLimits(lim Limits) error {
	for _, c := range Needed {
		dir, ok := g.ctl[c]
		if !ok {
			return fmt.Errorf("cgroup: %s has no %s directory", g.Name, c)
		}
		for _, f := range limitFiles(g.Mode, c, lim) {
			if err := write(filepath.Join(dir, f.name), f.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// limitFile is one value Create writes.
type limitFile struct{ name, value string }

// limitFiles are the files that carry controller c's part of lim in mode
// m, in the order they are written (Documentation/admin-guide/cgroup-v2.rst;
// for v1, Documentation/admin-guide/cgroup-v1/memory.rst, pids.rst and
// Documentation/scheduler/sched-bwc.rst).
func limitFiles(m Mode, c string, lim Limits) []limitFile {
	quota := strconv.Itoa(lim.CPUPercent * CPUPeriod / 100)
	switch {
	case c == "memory" && m == V2:
		return []limitFile{{"memory.max", strconv.FormatUint(lim.MemBytes, 10)}}
	case c == "memory" && m == V1:
		return []limitFile{{"memory.limit_in_bytes", strconv.FormatUint(lim.MemBytes, 10)}}
	case c == "pids":
		return []limitFile{{"pids.max", strconv.Itoa(lim.Pids)}}
	case c == "cpu" && m == V2:
		return []limitFile{{"cpu.max", quota + " " + strconv.Itoa(CPUPeriod)}}
	case c == "cpu" && m == V1: // period first: the quota is checked against it
		return []limitFile{{"cpu.cfs_period_us", strconv.Itoa(CPUPeriod)}, {"cpu.cfs_quota_us", quota}}
	}
	return nil
}

// FD is the v2 leaf opened O_DIRECTORY, for clone3's CLONE_INTO_CGROUP
// (syscall.SysProcAttr.UseCgroupFD, CgroupFD); -1 in v1 (use Add) and
// after Close.
func (g *Group) FD() int { return g.fd }

// Add moves process pid (all its threads) into the group: its pid is
// written to cgroup.procs in every directory.
func (g *Group) Add(pid int) error {
	for _, d := range g.Dirs {
		if err := write(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Close closes FD; the group stays.
func (g *Group) Close() {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
}

// Remove closes FD and removes the leaf directories, leaving their
// parents. The group's processes must have been reaped; a v1 rmdir that
// still sees them (EBUSY, while an exiting task is being released) is
// retried for up to 100 ms. Removing a removed group is a no-op.
func (g *Group) Remove() error {
	g.Close()
	var errs []error
	for _, d := range g.Dirs {
		err := syscall.Rmdir(d)
		for i := 0; err == syscall.EBUSY && i < 10; i++ {
			time.Sleep(10 * time.Millisecond)
			err = syscall.Rmdir(d)
		}
		if err != nil && err != syscall.ENOENT {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// write writes one value to an existing cgroup file, which takes it
// whole or fails (a missing file, such as cpu.cfs_quota_us on a kernel
// without CONFIG_CFS_BANDWIDTH, fails with ENOENT).
func write(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(v)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", v, path, unwrapPath(err))
	}
	return nil
}

// unwrapPath drops *PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
