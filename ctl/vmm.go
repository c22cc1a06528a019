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
	"strings"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/netpolicy/sbnet"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/vmmproc"
)

// VMMRuntime is the Runtime backed by one `sandfs vmm` process per sandbox
// (vmmproc.Launch). A sandbox boots KernelPath with its template's root file
// system (<TemplatesDir>/<template>.ext4) as a copy-on-write virtio-blk disk
// whose private layer lives in the sandbox's Dir, plus virtio-vsock (the
// guest agent's 9P on port 564 via vsock/vsock.sock) and virtio-rng.
//
// Spec.Dir (prepareRunDir), as root:
//
//	<Dir>/                 root 0700   what the daemon reads and writes
//	  vmm.sock             control socket (bound by vmmproc.Launch)
//	  vmm.sock.json        the VMM's config
//	  vmm.sock.pid         who the VMM is (pid, start time, boot id), for
//	                       Reattach after a daemon restart (Detached)
//	  vmm.log, console     the VMM's stderr and the serial console (opened
//	                       by Launch, handed over as fds)
//	  root/                root 0700   empty: the VMM builds its root on it,
//	                       in its own mount namespace (vmm/vmmproc/jail.go)
//	  vsock/               root 0711   vsock.sock, bound by the VMM before it
//	                       drops to its uid; the daemon dials it here
//	  work/                uid 0700    the only place the VMM writes:
//	                       rootfs.cow(.map), snapshots
//
// A jailed VMM sees work/ and vsock/ (and the template, read-only) at
// these paths and nothing else; root never opens a path inside work/.
type VMMRuntime struct {
	KernelPath   string
	TemplatesDir string
	Log          *slog.Logger
	// Binary is the executable to run as the VMM, with the arguments
	// "vmm -config FILE": bin/sandfs-vmm (the daemon sets it from
	// vmmproc.FindBinary) or a sandfs binary (default: this one).
	Binary string
	// Cmdline is added to every guest's kernel command line.
	Cmdline string
	// Jailed: each VMM runs in its jail (Jail.Root on <Dir>/root, its
	// own namespaces, seccomp) as its sandbox's uid and gid (Spec.UID,
	// from UIDs). NewVMMRuntime sets it when running as root, with
	// Jail's namespaces and seccomp, UIDs (DefaultVMMIDs, or UseIDs),
	// and the cgroup when the host also has usable controllers
	// (cgroup.Detect: v2, or v1 as on hybrid hosts); Cgroup is filled
	// per sandbox as "sandfs/<id>-<hash of the run dir>" when
	// CgroupParent is set.
	Jailed       bool
	Jail         vmmproc.JailConfig
	UIDs         IDRange
	CgroupParent string
	// CacheDir, when set, holds the template snapshot cache
	// (tmplcache.go): Start then restores every sandbox from a snapshot
	// of its template booted once for its shape (tmplboot.go), instead
	// of booting it. The daemon sets <state>/templates.
	CacheDir string
	// Detached: the sandboxes' VMMs outlive the daemon (not the
	// template builds'), and Reattach adopts them when it starts again
	// (vmm_adopt.go). The daemon sets it; without it a VMM dies with
	// the process that started it.
	Detached bool
	// Spares, when set, are VMM processes started ahead (vmmproc.Spares):
	// a sandbox's launch takes one when it can, and skips the VMM's
	// exec and the start of its runtime. The daemon keeps one.
	Spares *vmmproc.Spares
	// Net, when set, gives every machine a network of its own
	// (vmm_net.go); nil: machines have no network device.
	Net *sbnet.Manager
	// DNSUpstream is the host's resolver ("host:port", UDP) that each
	// sandbox's resolver forwards allowed names to; "" none (guests
	// resolve no name).
	DNSUpstream string

	cacheOnce sync.Once
	cache     *tmplCache
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
		log.Warn(noLimits, "why", "not root: no cgroups, jail, namespaces, seccomp or uid drop")
		return r
	}
	r.Jailed, r.UIDs = true, DefaultVMMIDs
	r.Jail = vmmproc.JailConfig{Namespaces: true, Seccomp: true}
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

// UseIDs makes ids the range of the VMMs' uids. A jailing runtime refuses
// a range that holds any id of the host's users or groups, or of their
// subordinate ids (/etc/passwd, group, subuid, subgid).
func (r *VMMRuntime) UseIDs(ids IDRange) error {
	return r.useIDs(ids, hostIDFiles)
}

func (r *VMMRuntime) useIDs(ids IDRange, files []string) error {
	if r.Jailed {
		if ids.Count == 0 {
			return fmt.Errorf("vmm uids: a jailed VMM needs a uid range")
		}
		if o := ids.overlaps(files); len(o) > 0 {
			return fmt.Errorf("vmm uids %s hold host ids (pick another range with --vmm-uids): %s", ids, strings.Join(o, "; "))
		}
		r.Log.Info("vmm runtime: each sandbox's VMM runs as a uid of its own", "range", ids.String())
	}
	r.UIDs = ids
	return nil
}

// IDs implements IDRanger: UIDs when the VMMs are jailed, none otherwise.
func (r *VMMRuntime) IDs() IDRange {
	if !r.Jailed {
		return IDRange{}
	}
	return r.UIDs
}

var (
	_ Runtime  = (*VMMRuntime)(nil)
	_ IDRanger = (*VMMRuntime)(nil)
)

// Start implements Runtime.Start.
// With CacheDir set it restores the template's snapshot; else it boots.
func (r *VMMRuntime) Start(ctx context.Context, s Spec) (Machine, error) {
	if r.CacheDir != "" {
		return r.startFromTemplate(ctx, s)
	}
	return r.StartFrom(ctx, s, "")
}

// StartFrom is Start from a snapshot directory written by
// vmmproc.Process.Save (the snapshot format's meta + mem) of a machine with the same
// configuration; "" boots. The sandbox's disk layer (work/rootfs.cow in
// s.Dir) must be the one that matches the snapshot: copying it is the
// caller's. A jailed VMM saves snapshots in WorkDir only; a snapshot
// elsewhere is shown to it read-only.
func (r *VMMRuntime) StartFrom(ctx context.Context, s Spec, snapshot string) (Machine, error) {
	return r.startFrom(ctx, s, snapshot, s.ID, r.Detached)
}

// startFrom is StartFrom with the host name on the guest's command line
// given (a restore needs the command line of the machine it restores),
// and whether the VMM outlives the daemon (a template build's does not).
func (r *VMMRuntime) startFrom(ctx context.Context, s Spec, snapshot, hostname string, detached bool) (Machine, error) {
	cfg, err := r.config(s, hostname)
	if err != nil {
		return nil, err
	}
	cfg.Detached = detached
	if err := prepareRunDir(s.Dir, cfg.Jail.UID); err != nil {
		return nil, err
	}
	return r.launch(ctx, s.ID, s.Config, cfg, snapshot)
}

// labelImage is the VMM config's label holding the identity of the
// disk's base image at launch (imageID), which Reattach gives back to an
// adopted machine: its snapshots record it.
const labelImage = "image"

// launch starts the VMM of sandbox id with cfg, restoring snapshot (""
// boots), in a run directory prepareRunDir laid out; with networks, its
// network has sc's egress policy and group membership.
func (r *VMMRuntime) launch(ctx context.Context, id string, sc Config, cfg vmmproc.Config, snapshot string) (*vmmMachine, error) {
	cfg.Restore = snapshot
	image, _ := imageID(cfg.Disks[0].Path) // "": its snapshots are refused
	cfg.Labels = map[string]string{labelImage: image}
	start := time.Now()
	n, err := r.netUp(id, sc, &cfg)
	if err != nil {
		return nil, err
	}
	netUp := time.Since(start)
	p, err := r.Spares.Launch(ctx, cfg) // vmmproc.Launch without spares
	if cfg.TapFD != nil {
		cfg.TapFD.Close() // the VMM has its own
	}
	if err != nil {
		r.netDown(n)
		// The run directory goes with the failed sandbox: keep what the
		// guest and the VMM said last in the log.
		r.Log.Warn("vmm failed to start", "id", id, "snapshot", snapshot, "err", err,
			"console", logTail(cfg.Console, 2000), "vmmlog", logTail(cfg.LogFile, 2000))
		return nil, fmt.Errorf("start vmm: %w", err)
	}
	done := r.watchNet(p, n)
	r.Log.Info("vmm started", "id", id, "pid", p.Pid(), "mem", cfg.MemBytes, "cpus", cfg.CPUs, "snapshot", snapshot,
		"net", netUp.Round(time.Millisecond), "process", (time.Since(start) - netUp).Round(time.Millisecond), "launch", p.LaunchPhases())
	boot := "cold"
	if snapshot != "" {
		boot = "restore"
	}
	return &vmmMachine{p: p, uds: cfg.Vsock.UDS, console: cfg.Console, limits: string(p.Limits()), boot: boot,
		work: filepath.Dir(cfg.Disks[0].Overlay), uid: cfg.Jail.UID, host: cmdlineValue(cfg.Cmdline, "sandfs.hostname"), image: image, net: n, done: done}, nil
}

// config is the VMM configuration of sandbox s, whose guest boots with
// host name hostname.
func (r *VMMRuntime) config(s Spec, hostname string) (vmmproc.Config, error) {
	tmpl := s.Template
	if tmpl == "" {
		tmpl = "base"
	}
	rootfs := filepath.Join(r.TemplatesDir, tmpl+".ext4")
	if _, err := os.Stat(rootfs); err != nil {
		return vmmproc.Config{}, Errorf(syscall.ENOENT, "new: no template %s", msg.Cite(tmpl))
	}
	if _, err := os.Stat(r.KernelPath); err != nil {
		return vmmproc.Config{}, Errorf(syscall.EIO, "new: no kernel: %v", err)
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
	if r.Jailed {
		if !r.UIDs.Contains(s.UID) {
			return vmmproc.Config{}, Errorf(syscall.EINVAL, "new: sandbox %s has no uid of the range %s", msg.Cite(s.ID), r.UIDs)
		}
		jail.UID, jail.GID = s.UID, s.UID
		jail.Root, jail.Work = filepath.Join(s.Dir, "root"), filepath.Join(s.Dir, "work")
	}
	if r.CgroupParent != "" {
		// Sandbox ids are unique within one state directory only: two
		// daemons (or a test's) may both have a "t", and a VMM being
		// reaped still holds its group. The run dir names the pair.
		sum := sha256.Sum256([]byte(s.Dir))
		jail.Cgroup = r.CgroupParent + "/" + s.ID + "-" + hex.EncodeToString(sum[:4])
	}
	cfg := vmmproc.Config{
		ID: s.ID, Kernel: r.KernelPath, MemBytes: mem, CPUs: cpus,
		Cmdline: "root=/dev/vda rw rootfstype=ext4 init=/sbin/init quiet sandfs.hostname=" + hostname + " " + r.guestCmdline(),
		Disks:   []vmmproc.DiskConfig{{Path: rootfs, Overlay: filepath.Join(s.Dir, "work", "rootfs.cow"), ID: "rootfs"}},
		Vsock:   &vmmproc.VsockConfig{CID: 3, UDS: vsockPath(s.Dir)},
		RNG:     true,
		P9:      &vmmproc.P9Config{Tag: WorldTag, Port: WorldPort},
		Binary:  r.Binary,
		Socket:  vmmSocket(s.Dir),
		Console: filepath.Join(s.Dir, "console"),
		LogFile: filepath.Join(s.Dir, "vmm.log"),
		Jail:    jail,
	}
	cfg.Detached = r.Detached
	return cfg, nil
}

// WorkDir is where a sandbox's VMM writes (its disk layer, and the
// snapshots vmmproc.Process.Save writes): <Dir>/work.
func WorkDir(s Spec) string { return filepath.Join(s.Dir, "work") }

// prepareRunDir lays out dir as VMMRuntime's doc shows, for a VMM that
// runs as uid (0: not jailed, nothing is handed over). dir and its parts
// are checked with lstat and never followed: a part that is not a
// directory (a symlink left by anyone) is an error, not something to
// chown or write through. An existing work/ keeps its content (the disk
// layer of a restart from a snapshot).
func prepareRunDir(dir string, uid int) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Errorf(syscall.EIO, "new: %v", err)
	}
	parts := []struct {
		name string
		mode os.FileMode
		uid  int
	}{{".", 0o700, 0}, {"root", 0o700, 0}, {"vsock", 0o711, 0}, {"work", 0o700, uid}}
	for _, p := range parts {
		path := filepath.Join(dir, p.name)
		fi, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) {
			err = os.Mkdir(path, p.mode)
			if err == nil {
				fi, err = os.Lstat(path)
			}
		}
		if err != nil {
			return Errorf(syscall.EIO, "new: run directory: %v", err)
		}
		if !fi.IsDir() {
			return Errorf(syscall.EIO, "new: run directory: %s is a %s, not a directory", msg.Cite(path), fi.Mode().Type())
		}
		if uid != 0 {
			// The parent is root's (checked first): nobody can swap
			// path between the lstat and these calls.
			if err := os.Lchown(path, p.uid, p.uid); err != nil {
				return Errorf(syscall.EIO, "new: run directory: %v", err)
			}
		}
		if err := os.Chmod(path, p.mode); err != nil {
			return Errorf(syscall.EIO, "new: run directory: %v", err)
		}
	}
	return nil
}

// vmmMachine is a Machine backed by a VMM process.
type vmmMachine struct {
	p       *vmmproc.Process
	uds     string // hybrid vsock socket (DialGuest, vmm_guest.go)
	console string // serial log (ConsolePath)
	limits  string // Limits
	boot    string // Boot: cold or restore
	// For snapshots (vmmsnap.go): its work directory, the uid it runs
	// as (0: not jailed), the host name its kernel command line gives,
	// the snapshot it last took or was restored from (its sandbox's op
	// guards it), and its template's snapshot.
	work, host string
	image      string // imageID of its disk's base image, at launch
	uid        int
	last       string
	base       string // the template snapshot it was restored from (its entry's _<key>), "" none
	// root: when last is a pause image (vmmpause.go), the snapshot that
	// image is a delta over, which is not one ("" none: a full image, or
	// one over an earlier pause image).
	root string
	// lastUnsure: last comes from a record that may lag behind the VMM
	// (an adopted machine); a delta over it that the VMM refuses is
	// taken again full.
	lastUnsure bool
	net        *sbnet.Net      // its network (vmm_net.go), nil none
	done       <-chan struct{} // Done: closed when the VMM has ended and its network is gone
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
func (m *vmmMachine) Done() <-chan struct{} {
	if m.done == nil {
		return m.p.Done()
	}
	return m.done
}

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

// LastWords is what the guest's console and the VMM's log said last: the
// daemon logs it when a machine ends unasked (lifecycle.go), since the run
// directory may go with the sandbox and a guest that resets by a triple
// fault prints nothing (the VMM logs its registers). vmm.log's tail is
// long enough for a SIGUSR1 dump's vCPU lines (AskDump), which follow
// its devices'.
func (m *vmmMachine) LastWords() []any {
	return []any{"console", logTail(m.console, 2000), "vmmlog", logTail(filepath.Join(filepath.Dir(m.console), "vmm.log"), 8000)}
}

// AskDump has the VMM write its state dump to its log (Sandbox.stallDump).
func (m *vmmMachine) AskDump() { m.p.AskDump() }

var _ dumper = (*vmmMachine)(nil)

// untilEnd is ctx, also cancelled when the machine ends: a wait for its
// agent then ends at once instead of after agentWait.
func (m *vmmMachine) untilEnd(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-m.p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// whyEnded is err, or, when the machine has ended meanwhile, err with
// why it ended (EIO): a dead VMM's wait for its agent otherwise reads as
// a guest that did not answer.
func (m *vmmMachine) whyEnded(err error) error {
	select {
	case <-m.p.Done():
		return Errorf(syscall.EIO, "%s (the vmm ended: %v)", errText(err), m.Err())
	default:
		return err
	}
}

// Pid implements Pider.Pid.
func (m *vmmMachine) Pid() int { return m.p.Pid() }

// Limits implements Limiter.Limits: the cgroup version of the VMM's
// cgroup, or none.
func (m *vmmMachine) Limits() string { return m.limits }

// Process is the VMM process behind a Machine started by VMMRuntime (for
// snapshots: Process.Save), or nil.
func VMMProcess(m Machine) *vmmproc.Process {
	if vm, ok := m.(*vmmMachine); ok {
		return vm.p
	}
	return nil
}
