package ctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"sandfs/vmm"
)

// VMMRuntime is the Runtime backed by one `sandfs vmm` process per sandbox
// (vmm.Launch). A sandbox boots KernelPath with its template's root file
// system (<TemplatesDir>/<template>.ext4) as a copy-on-write virtio-blk disk
// whose private layer lives in the sandbox's Dir, plus virtio-vsock (the
// guest agent's 9P on port 564 via <Dir>/vsock.sock) and virtio-rng.
//
// Files in Spec.Dir: vmm.sock (control), vmm.sock.json (config),
// vmm.log (the VMM's stderr), console (serial log), rootfs.cow(.map)
// (disk changes), vsock.sock (hybrid vsock).
type VMMRuntime struct {
	KernelPath   string
	TemplatesDir string
	Log          *slog.Logger
	// Binary is the sandfs executable to run as the VMM (default: this one).
	Binary string
	// Cmdline is added to every guest's kernel command line.
	Cmdline string
	// Jail confines each VMM; Cgroup is filled per sandbox as
	// "sandfs/<id>" when CgroupParent is set. NewVMMRuntime turns on
	// namespaces, seccomp and the cgroup when running as root.
	Jail         vmm.JailConfig
	CgroupParent string
}

// NewVMMRuntime returns the VMM runtime for the daemon.
func NewVMMRuntime(kernelPath, templatesDir string, log *slog.Logger) *VMMRuntime {
	if log == nil {
		log = slog.Default()
	}
	r := &VMMRuntime{KernelPath: kernelPath, TemplatesDir: templatesDir, Log: log}
	if os.Geteuid() == 0 {
		r.Jail = vmm.JailConfig{Namespaces: true, Seccomp: true}
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			r.CgroupParent = "sandfs"
		}
	}
	return r
}

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
	p, err := vmm.Launch(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start vmm: %w", err)
	}
	r.Log.Info("vmm started", "id", s.ID, "pid", p.Pid(), "mem", cfg.MemBytes, "cpus", cfg.CPUs, "snapshot", snapshot)
	return &vmmMachine{p: p, uds: cfg.Vsock.UDS, console: cfg.Console}, nil
}

// config is the VMM configuration of sandbox s.
func (r *VMMRuntime) config(s Spec) (vmm.Config, error) {
	tmpl := s.Template
	if tmpl == "" {
		tmpl = "base"
	}
	rootfs := filepath.Join(r.TemplatesDir, tmpl+".ext4")
	if _, err := os.Stat(rootfs); err != nil {
		return vmm.Config{}, Errorf(syscall.ENOENT, "new: no template %s", quote(tmpl))
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
		jail.Cgroup = r.CgroupParent + "/" + s.ID
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

// vmmMachine is a Machine backed by a VMM process.
type vmmMachine struct {
	p       *vmm.Process
	uds     string // hybrid vsock socket (DialGuest, vmm_guest.go)
	console string // serial log (ConsolePath)
}

var (
	_ Machine = (*vmmMachine)(nil)
	_ Pider   = (*vmmMachine)(nil)
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

// Process is the VMM process behind a Machine started by VMMRuntime (for
// snapshots: Process.Save), or nil.
func VMMProcess(m Machine) *vmm.Process {
	if vm, ok := m.(*vmmMachine); ok {
		return vm.p
	}
	return nil
}
