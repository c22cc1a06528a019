package ctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
)

// VMMRuntime is the Runtime backed by one `sandfs vmm` process per sandbox
// (vmm.Launch). A sandbox boots KernelPath with its template's root file
// system (<TemplatesDir>/<template>.ext4) as a copy-on-write virtio-blk disk
// whose private layer lives in the sandbox's Dir, plus virtio-vsock (the
// guest agent's 9P on port 564 via <Dir>/vsock.sock) and virtio-rng.
//
// Files in Spec.Dir: vmm.sock (control), vmm.sock.json (config),
// vmm.log (the VMM's stderr), console (serial log), rootfs.cow(.map)
// (disk changes), vsock.sock (hybrid vsock). As root, Spec.Dir is owned
// by JailUID/JailGID (see prepareJailDir).
type VMMRuntime struct {
	KernelPath   string
	TemplatesDir string
	Log          *slog.Logger
	// Binary is the sandfs executable to run as the VMM (default: this one).
	Binary string
	// Cmdline is added to every guest's kernel command line.
	Cmdline string
	// Jail confines each VMM; Cgroup is filled per sandbox as
	// "sandfs/<id>-<hash of the run dir>" when CgroupParent is set. NewVMMRuntime turns on
	// namespaces, seccomp and the drop to JailUID/JailGID when running
	// as root, and the cgroup when the host also has usable controllers
	// (cgroup.Detect: v2, or v1 as on hybrid hosts). With Jail.UID set,
	// Start hands Spec.Dir to that uid/gid (the VMM rewrites the disk's
	// map file there by rename) and requires every ancestor of Spec.Dir
	// to be searchable by it; the template image stays root's and is
	// only read.
	Jail         vmm.JailConfig
	CgroupParent string
}

// NewVMMRuntime returns the VMM runtime for the daemon. It logs how the
// VMMs' resources will be limited, and a warning if they will not be
// (sandbox status then shows limits=none).
func NewVMMRuntime(kernelPath, templatesDir string, log *slog.Logger) *VMMRuntime {
	return newVMMRuntime(kernelPath, templatesDir, log, os.Geteuid() == 0, cgroup.Detect)
}

// newVMMRuntime is NewVMMRuntime with the privilege and the host's
// cgroup layout given.
func newVMMRuntime(kernelPath, templatesDir string, log *slog.Logger, root bool, detect func() (cgroup.Layout, error)) *VMMRuntime {
	if log == nil {
		log = slog.Default()
	}
	r := &VMMRuntime{KernelPath: kernelPath, TemplatesDir: templatesDir, Log: log}
	const noLimits = "vmm runtime: VMMs run without memory, CPU and PID limits (status shows limits=none)"
	if !root {
		log.Warn(noLimits, "why", "not root: no cgroups, namespaces, seccomp or uid drop")
		return r
	}
	r.Jail = vmm.JailConfig{Namespaces: true, Seccomp: true, UID: JailUID, GID: JailGID}
	switch l, err := detect(); {
	case err != nil:
		log.Warn(noLimits, "why", err)
	case l.Mode == cgroup.None:
		log.Warn(noLimits, "why", "no usable cgroup controllers: "+l.Why)
	default:
		r.CgroupParent = "sandfs"
		log.Info("vmm runtime: VMM limits", "cgroup", l.String())
	}
	return r
}

// JailUID and JailGID are the unprivileged ids NewVMMRuntime's VMMs run
// as after setup (nobody/nogroup).
const (
	JailUID = 65534
	JailGID = 65534
)

var _ Runtime = (*VMMRuntime)(nil)

// Start implements Runtime.Start.
func (r *VMMRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	return r.StartFrom(ctx, s, "")
}

// StartFrom is Start from a snapshot directory written by
// vmm.Process.Save (state.json + mem) of a machine with the same
// configuration; "" boots. The sandbox's disk layer (rootfs.cow in s.Dir)
// must be the one that matches the snapshot: copying it is the caller's.
func (r *VMMRuntime) StartFrom(ctx context.Context, s Spec, snapshot string) (Machine, error) {
	cfg, err := r.config(s)
	if err != nil {
		return nil, err
	}
	cfg.Restore = snapshot
	if err := prepareJailDir(s.Dir, cfg.Jail); err != nil {
		return nil, err
	}
	p, err := vmm.Launch(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start vmm: %w", err)
	}
	r.Log.Info("vmm started", "id", s.ID, "pid", p.Pid(), "mem", cfg.MemBytes, "cpus", cfg.CPUs, "snapshot", snapshot)
	return &vmmMachine{p: p, uds: cfg.Vsock.UDS, console: cfg.Console, limits: string(p.Limits())}, nil
}

// config is the VMM configuration of sandbox s.
func (r *VMMRuntime) config(s Spec) (vmm.Config, error) {
	tmpl := s.Template
	if tmpl == "" {
		tmpl = "base"
	}
	rootfs := filepath.Join(r.TemplatesDir, tmpl+".ext4")
	if _, err := os.Stat(rootfs); err != nil {
		return vmm.Config{}, Errorf(syscall.ENOENT, "new: no template %s", msg.Cite(tmpl))
	}
	if _, err := os.Stat(r.KernelPath); err != nil {
		return vmm.Config{}, Errorf(syscall.EIO, "new: no kernel: %v", err)
	}
	mem := s.MemBytes
	if mem == 0 {
		mem = 256 << 20
	}
	mem = (mem + 2<<20 - 1) &^ (2<<20 - 1)
	cpus := s.CPUs
	if cpus == 0 {
		cpus = 1
	}
	jail := r.Jail
	if r.CgroupParent != "" {
		// Sandbox ids are unique within one state directory only: two
		// daemons (or a test's) may both have a "t", and a VMM being
		// reaped still holds its group. The run dir names the pair.
		sum := sha256.Sum256([]byte(s.Dir))
		jail.Cgroup = r.CgroupParent + "/" + s.ID + "-" + hex.EncodeToString(sum[:4])
	}
	return vmm.Config{
		ID: s.ID, Kernel: r.KernelPath, MemBytes: mem, CPUs: cpus,
		Cmdline: "root=/dev/vda rw rootfstype=ext4 init=/sbin/init quiet sandfs.hostname=" + s.ID + " " + r.Cmdline,
		Disks:   []vmm.DiskConfig{{Path: rootfs, Overlay: filepath.Join(s.Dir, "rootfs.cow"), ID: "rootfs"}},
		Vsock:   &vmm.VsockConfig{CID: 3, UDS: filepath.Join(s.Dir, "vsock.sock")},
		RNG:     true,
		Binary:  r.Binary,
		Socket:  filepath.Join(s.Dir, "vmm.sock"),
		Console: filepath.Join(s.Dir, "console"),
		LogFile: filepath.Join(s.Dir, "vmm.log"),
		Jail:    jail,
	}, nil
}

// prepareJailDir makes dir usable by a VMM that drops to jail.UID/GID:
// dir is handed to that uid/gid (mode 0700), so that the VMM, after the
// drop, can write rootfs.cow.map by temp file + rename and snapshots
// into it; every ancestor must let the uid search it (the VMM resolves
// those paths after the drop). Files the VMM opens before the drop (the
// overlay, vsock.sock) and those Launch opens for it (console, vmm.log,
// the control socket) need nothing. No-op without a uid drop.
func prepareJailDir(dir string, jail vmm.JailConfig) error {
	if jail.UID == 0 && jail.GID == 0 {
		return nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Errorf(syscall.EIO, "new: %v", err)
	}
	for a := filepath.Dir(dir); ; a = filepath.Dir(a) {
		fi, err := os.Stat(a)
		if err != nil {
			return Errorf(syscall.EIO, "new: %v", err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		ok := mode&0o001 != 0 ||
			st != nil && int(st.Uid) == jail.UID && mode&0o100 != 0 ||
			st != nil && int(st.Gid) == jail.GID && mode&0o010 != 0
		if !ok {
			return Errorf(syscall.EACCES, "new: directory %s (mode %o) not searchable by the VMM's uid %d: run directory %s unreachable after the privilege drop", msg.Cite(a), mode, jail.UID, msg.Cite(dir))
		}
		if a == filepath.Dir(a) {
			break
		}
	}
	if err := os.Chown(dir, jail.UID, jail.GID); err != nil {
		return Errorf(syscall.EIO, "new: hand run directory to the VMM's uid: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return Errorf(syscall.EIO, "new: %v", err)
	}
	return nil
}

// vmmMachine is a Machine backed by a VMM process.
type vmmMachine struct {
	p       *vmm.Process
	uds     string // hybrid vsock socket (DialGuest, vmm_guest.go)
	console string // serial log (ConsolePath)
	limits  string // Limits
}

var (
	_ Machine = (*vmmMachine)(nil)
	_ Pider   = (*vmmMachine)(nil)
	_ Limiter = (*vmmMachine)(nil)
)

// Pause implements Machine.Pause.
func (m *vmmMachine) Pause(ctx context.Context) error { return m.p.Pause(ctx) }

// Resume implements Machine.Resume.
func (m *vmmMachine) Resume(ctx context.Context) error { return m.p.Resume(ctx) }

// Stop implements Machine.Stop.
func (m *vmmMachine) Stop(ctx context.Context) error { return m.p.Stop(ctx) }

// Done implements Machine.Done.
func (m *vmmMachine) Done() <-chan struct{} { return m.p.Done() }

// Err implements Machine.Err: nil after Stop; a guest that reset or
// powered itself off is reported as such.
func (m *vmmMachine) Err() error {
	select {
	case <-m.p.Done():
	default:
		return nil
	}
	reason, err := m.p.Wait()
	switch {
	case err != nil:
		return err
	case reason == vmm.ExitStopped:
		return nil
	case reason == vmm.ExitReset, reason == vmm.ExitPoweroff:
		return errors.New("guest shut down (" + string(reason) + ")")
	}
	return fmt.Errorf("vmm ended: %s", reason)
}

// Pid implements Pider.Pid.
func (m *vmmMachine) Pid() int { return m.p.Pid() }

// Limits implements Limiter.Limits: the cgroup version of the VMM's
// cgroup, or none.
func (m *vmmMachine) Limits() string { return m.limits }

// Process is the VMM process behind a Machine started by VMMRuntime (for
// snapshots: Process.Save), or nil.
func VMMProcess(m Machine) *vmm.Process {
	if vm, ok := m.(*vmmMachine); ok {
		return vm.p
	}
	return nil
}
