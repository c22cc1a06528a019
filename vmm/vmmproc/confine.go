package vmmproc

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/vmm/cgroup"
)

// Confinement, after Firecracker's jailer: Launch puts the process in new
// mount, PID, IPC, network and UTS namespaces, with an empty environment,
// and a cgroup with memory/CPU/PID limits in the host's layout (package
// cgroup: v2, or v1 hierarchies); the process builds its own root and
// pivots into it before it opens anything there (jail.go); once /dev/kvm,
// guest RAM, disks and sockets are open, it drops the jail's devices, drops
// to its sandbox's uid/gid and installs a seccomp filter (seccomp.go).

// setupCgroup creates cfg.Jail.Cgroup with cfg's limits in the layout
// cgroup.Detect finds; a host without usable controllers is an error
// (the caller asked for limits).
func setupCgroup(cfg *Config) (*cgroup.Group, error) {
	l, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	return l.Create(cfg.Jail.Cgroup, cgroupLimits(cfg))
}

// cgroupLimits are cfg.Jail's limits with their defaults: guest RAM +
// 128 MiB, 100 % of a CPU per vCPU, 64 tasks.
func cgroupLimits(cfg *Config) cgroup.Limits {
	j := cfg.Jail
	lim := cgroup.Limits{MemBytes: j.MemMax, CPUPercent: j.CPUMax, Pids: j.PidsMax}
	if lim.MemBytes == 0 {
		lim.MemBytes = cfg.MemBytes + 128<<20
	}
	if lim.CPUPercent == 0 {
		lim.CPUPercent = 100 * cfg.CPUs
	}
	if lim.Pids == 0 {
		lim.Pids = 64
	}
	return lim
}

// removeCgroup removes the process's cgroup, if any, once it has been
// reaped (a no-op the second time).
func (p *Process) removeCgroup() error {
	if p.cg == nil {
		return nil
	}
	return p.cg.Remove()
}

// Limits is the cgroup version that limits the process (cgroup.V2 or
// cgroup.V1), or cgroup.None when it runs without a cgroup.
func (p *Process) Limits() cgroup.Mode {
	if p.cg == nil {
		return cgroup.None
	}
	return p.cg.Mode
}

// waitGate blocks until Launch has put this process in its cgroup v1
// group (and before anything the limits should cover is allocated):
// Launch passes -gate and the read end of a pipe as fdGate, and writes one
// byte once the pid is in every hierarchy. The flag, not the fd, says
// whether there is a gate: without one, fd 6 is free for anything, and
// the Go runtime takes it for its own epoll fd before run starts.
func waitGate() error {
	f := inheritedFile(fdGate, "gate")
	if f == nil {
		return fmt.Errorf("start gate: fd %d is not open", fdGate)
	}
	defer f.Close()
	var b [1]byte
	if n, _ := f.Read(b[:]); n != 1 {
		return fmt.Errorf("start gate: closed before the cgroup was set up")
	}
	return nil
}

// confineSelf applies the rest of cfg.Jail once the machine and its
// devices exist (the root, if any, was entered before: enterJail), in
// order: the open files bound, private mounts, the jail's devices gone,
// uid/gid, no_new_privs, seccomp.
func confineSelf(cfg *Config) error {
	j := cfg.Jail
	if err := capFiles(); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	if j.Namespaces {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("confine: make mounts private: %w", err)
		}
	}
	if j.Root != "" {
		if err := leaveDevices(cfg); err != nil {
			return fmt.Errorf("confine: %w", err)
		}
	}
	if j.GID != 0 || j.UID != 0 {
		// syscall's, not unix's: it changes every thread (AllThreadsSyscall);
		// unix.Setgroups changes only the calling one, and the others
		// would keep root's supplementary groups.
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("confine: setgroups: %w", err)
		}
		if err := unix.Setresgid(j.GID, j.GID, j.GID); err != nil {
			return fmt.Errorf("confine: setresgid %d: %w", j.GID, err)
		}
		if err := unix.Setresuid(j.UID, j.UID, j.UID); err != nil {
			return fmt.Errorf("confine: setresuid %d: %w", j.UID, err)
		}
	}
	if j.Seccomp {
		if err := installSeccomp(vmmPolicy()); err != nil {
			return fmt.Errorf("confine: %w", err)
		}
	}
	if afterConfine != nil {
		go afterConfine(cfg)
	}
	return nil
}

// afterConfine, when set, runs in its own goroutine once the process is
// confined. Only the vmm package's tests set it (main_test.go): their
// binary, run as the VMM, then plays a compromised VMM (attack_test.go).
// The sandfs binary never sets it.
var afterConfine func(cfg *Config)

// maxFiles bounds a VMM's open files, soft and hard: the daemon raises
// its own bound to the kernel's (it holds files for every sandbox: see
// tools/sandfs), and a VMM, which inherits it, needs a few dozen (its
// KVM and vCPU fds, disks, tap, sockets; one a guest's vsock connection).
// Hard as well, so that a VMM a guest took over cannot raise it: what it
// holds costs the host's kernel memory.
const maxFiles = 4096

// capFiles lowers the process's RLIMIT_NOFILE to maxFiles, or leaves it
// where it is lower.
func capFiles() error {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return fmt.Errorf("open files limit: %w", err)
	}
	n := min(r.Max, maxFiles)
	if r.Cur == n && r.Max == n {
		return nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("open files limit %d: %w", n, err)
	}
	return nil
}
