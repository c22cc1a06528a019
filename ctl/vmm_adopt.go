package ctl

// The VMM runtime across a daemon restart: a Detached VMM outlives the
// daemon; Reattach adopts it again from its sandbox's run directory
// (vmmproc.Adopt), Reap ends one whose sandbox is not re-attached
// (vmmproc.EndOrphan).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sandfs/snapshot"
	"sandfs/vmm/vmmproc"
)

var (
	_ Reattacher = (*VMMRuntime)(nil)
	_ Reaper     = (*VMMRuntime)(nil)
)

// reattachTimeout bounds Reattach's handshake with a VMM's control (the
// daemon's start waits for it, sandbox after sandbox): a VMM that does
// not answer by then is ended, its sandbox dead.
const reattachTimeout = 30 * time.Second

// vmmSocket is the control socket of the VMM of the sandbox whose run
// directory is dir (VMMRuntime's doc shows the layout).
func vmmSocket(dir string) string { return filepath.Join(dir, "vmm.sock") }

// vsockPath is the hybrid vsock socket of that VMM.
func vsockPath(dir string) string { return filepath.Join(dir, "vsock", "vsock.sock") }

// Reattach implements Reattacher: it adopts the VMM recorded in s.Dir
// (vmmproc.Adopt: the process Launch recorded in vmm.sock.pid, checked
// by pid, start time and boot id, whose control answers), whose stderr
// goes on to vmm.log (vmmproc.Process.ReadLog). The machine's
// guest is reached as after Start (DialGuest on the same vsock socket);
// its end is seen through a pidfd, with no exit status (Err says so); its
// first snapshot is a delta over the one it last took or was restored
// from (adoptLast: s.Last, or its template's snapshot). On
// error no VMM is left running: one that exists but cannot be adopted is
// stopped (killed after vmmproc.DefaultStopTimeout), and the error says
// why, e.g. "vmm process gone: pid 812 has exited".
func (r *VMMRuntime) Reattach(ctx context.Context, s Spec) (Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, reattachTimeout)
	defer cancel()
	p, err := vmmproc.Adopt(ctx, vmmSocket(s.Dir))
	if err != nil {
		errno := syscall.EIO
		if errors.Is(err, vmmproc.ErrGone) {
			errno = syscall.ESRCH
		}
		return nil, Errorf(errno, "%v", err)
	}
	if err := p.ReadLog(filepath.Join(s.Dir, "vmm.log")); err != nil {
		r.Log.Warn("adopted vmm: its log is not read", "id", s.ID, "err", err)
	}
	cfg := p.Config()
	boot := "cold"
	if cfg.Restore != "" {
		boot = "restore"
	}
	n, err := r.reattachNet(p, s.Net)
	if err != nil {
		// The machine runs on: its tap keeps the filter the previous
		// daemon attached, with the policy then in force (its record's);
		// only live changes are refused (ENODEV).
		r.Log.Error("vmm adopted without its network", "id", s.ID, "err", err)
	}
	r.Log.Info("vmm adopted", "id", s.ID, "pid", p.Pid(), "limits", string(p.Limits()), "net", cfg.Labels[labelNet])
	m := &vmmMachine{p: p, uds: vsockPath(s.Dir), console: filepath.Join(s.Dir, "console"), limits: string(p.Limits()), boot: boot,
		work: WorkDir(s), uid: cfg.Jail.UID, host: cmdlineValue(cfg.Cmdline, "sandfs.hostname"), image: cfg.Labels[labelImage], net: n, done: r.watchNet(p, n)}
	r.adoptLast(m, s.Last, cfg.Restore)
	return m, nil
}

// adoptLast gives an adopted machine the snapshot it last took or was
// restored from, so that its next snapshot can be a delta: last from the
// sandbox's record, else the template snapshot it was restored from
// (restored: its config's Restore) when the cache still has that entry.
// The record may lag behind the VMM (a daemon killed after the VMM wrote
// a snapshot, before the record): the machine is marked unsure, and a
// delta the VMM refuses is taken again full (vmmMachine.Snapshot).
func (r *VMMRuntime) adoptLast(m *vmmMachine, last, restored string) {
	if from := filepath.Base(restored); restored != "" && r.adoptBase(m, from) && last == "" {
		last = from
	}
	m.last, m.lastUnsure = last, last != ""
}

// adoptBase sets m.base when from names a template snapshot ("_<key>")
// whose cache entry is still there, and reports whether it did.
func (r *VMMRuntime) adoptBase(m *vmmMachine, from string) bool {
	if r.CacheDir == "" || !strings.HasPrefix(from, snapBaseMark) || from == snapBaseMark || strings.HasPrefix(from, pauseMark) || !validBase(from) {
		return false
	}
	entry := filepath.Join(r.CacheDir, from[len(snapBaseMark):], from)
	if fi, err := os.Stat(filepath.Join(entry, snapshot.MetaFile)); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	m.base = entry
	return true
}

// Reap implements Reaper: the VMM still running in dir, if any, is
// stopped (vmmproc.EndOrphan); what it left beside its files (sockets,
// records, its cgroup) is removed; console, vmm.log and work/ stay.
func (r *VMMRuntime) Reap(dir string) error {
	found, err := vmmproc.EndOrphan(vmmSocket(dir))
	if found {
		r.Log.Warn("vmm of a sandbox that is not re-attached: stopped", "dir", dir)
	}
	return err
}
