package vmm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/vmm/cgroup"
)

// Confinement, after Firecracker's jailer: Launch puts the process in new
// mount, PID and IPC namespaces and a cgroup with memory/CPU/PID limits in
// the host's layout (package cgroup: v2, or v1 hierarchies); the process,
// once /dev/kvm, guest RAM, disks and sockets are open, makes its mounts
// private, drops to an unprivileged uid/gid and installs a seccomp
// allowlist whose violations kill it (SECCOMP_RET_KILL_PROCESS).

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
// Launch passes the read end of a pipe as fdGate and writes one byte once
// the pid is in every hierarchy. Without fdGate (cgroup v2, entered at
// clone time, or no cgroup) it returns at once.
func waitGate() error {
	f := inheritedFile(fdGate, "gate")
	if f == nil {
		return nil
	}
	defer f.Close()
	var b [1]byte
	if n, _ := f.Read(b[:]); n != 1 {
		return fmt.Errorf("start gate: closed before the cgroup was set up")
	}
	return nil
}

// confineSelf applies the in-process part of cfg.Jail, in order: private
// mounts, uid/gid, no_new_privs, seccomp.
func confineSelf(cfg *Config) error {
	j := cfg.Jail
	if j.Namespaces {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("confine: make mounts private: %w", err)
		}
	}
	if j.GID != 0 || j.UID != 0 {
		if err := unix.Setgroups(nil); err != nil {
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
		if err := installSeccomp(allowedSyscalls); err != nil {
			return fmt.Errorf("confine: %w", err)
		}
	}
	return nil
}

// allowedSyscalls is what the VMM needs after setup: the Go runtime
// (threads, signals, timers, netpoller), KVM ioctls, device I/O on open
// fds, the control socket, and snapshot files.
var allowedSyscalls = []uintptr{
	// Go runtime.
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_MMAP, unix.SYS_MUNMAP,
	unix.SYS_MPROTECT, unix.SYS_MADVISE, unix.SYS_BRK, unix.SYS_RT_SIGACTION,
	unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_SIGALTSTACK,
	unix.SYS_CLONE, unix.SYS_CLONE3, unix.SYS_EXIT, unix.SYS_EXIT_GROUP, unix.SYS_FUTEX,
	unix.SYS_NANOSLEEP, unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_GETTIMEOFDAY,
	unix.SYS_SCHED_YIELD, unix.SYS_SCHED_GETAFFINITY, unix.SYS_GETPID, unix.SYS_GETTID,
	unix.SYS_TGKILL, unix.SYS_TKILL, unix.SYS_GETRANDOM, unix.SYS_RESTART_SYSCALL,
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_WAIT,
	unix.SYS_EVENTFD2, unix.SYS_PIPE2, unix.SYS_FCNTL, unix.SYS_PRLIMIT64, unix.SYS_UNAME,
	unix.SYS_SETITIMER, unix.SYS_TIMER_CREATE, unix.SYS_TIMER_SETTIME, unix.SYS_TIMER_DELETE,
	unix.SYS_GETUID, unix.SYS_GETEUID, unix.SYS_GETGID, unix.SYS_GETEGID, unix.SYS_MINCORE,
	// glibc threads (cgo builds): rseq and robust futex lists on each new thread.
	unix.SYS_RSEQ, unix.SYS_SET_ROBUST_LIST, unix.SYS_EPOLL_PWAIT2, unix.SYS_MEMBARRIER,
	// KVM and device I/O.
	unix.SYS_IOCTL, unix.SYS_PREAD64, unix.SYS_PWRITE64, unix.SYS_READV, unix.SYS_WRITEV,
	unix.SYS_PREADV, unix.SYS_PWRITEV, unix.SYS_LSEEK, unix.SYS_FSYNC, unix.SYS_FDATASYNC,
	unix.SYS_FALLOCATE, unix.SYS_FTRUNCATE, unix.SYS_COPY_FILE_RANGE, unix.SYS_DUP, unix.SYS_DUP3,
	// Sockets (control, hybrid vsock).
	unix.SYS_SOCKET, unix.SYS_CONNECT, unix.SYS_ACCEPT4, unix.SYS_BIND, unix.SYS_LISTEN,
	unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME, unix.SYS_SETSOCKOPT, unix.SYS_GETSOCKOPT,
	unix.SYS_SHUTDOWN, unix.SYS_RECVFROM, unix.SYS_SENDTO, unix.SYS_RECVMSG, unix.SYS_SENDMSG,
	// Files: snapshots, logs.
	unix.SYS_OPENAT, unix.SYS_FSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX, unix.SYS_MKDIRAT,
	unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_UNLINKAT, unix.SYS_GETDENTS64,
	unix.SYS_READLINKAT, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2, unix.SYS_FCHMOD, unix.SYS_FCHOWN,
}

// Seccomp constants (linux/seccomp.h, linux/audit.h, linux/filter.h).
const (
	seccompSetModeFilter  = 1
	seccompFlagTSync      = 1
	seccompRetKillProcess = 0x80000000
	seccompRetAllow       = 0x7fff0000
	auditArchX8664        = 0xc000003e
	bpfLdWAbs             = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK               = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfRetK               = unix.BPF_RET | unix.BPF_K
	seccompDataNr         = 0 // offsetof(struct seccomp_data, nr)
	seccompDataArch       = 4 // offsetof(struct seccomp_data, arch)
)

// seccompFilter builds the classic-BPF allowlist: wrong arch → kill;
// nr in allow → allow; anything else → kill the process.
func seccompFilter(allow []uintptr) []unix.SockFilter {
	n := len(allow)
	f := []unix.SockFilter{
		{Code: bpfLdWAbs, K: seccompDataArch},
		{Code: bpfJeqK, Jt: 1, Jf: 0, K: auditArchX8664},
		{Code: bpfRetK, K: seccompRetKillProcess},
		{Code: bpfLdWAbs, K: seccompDataNr},
	}
	for i, nr := range allow {
		f = append(f, unix.SockFilter{Code: bpfJeqK, Jt: uint8(n - i), Jf: 0, K: uint32(nr)})
	}
	f = append(f,
		unix.SockFilter{Code: bpfRetK, K: seccompRetKillProcess},
		unix.SockFilter{Code: bpfRetK, K: seccompRetAllow})
	return f
}

// installSeccomp sets no_new_privs and installs the filter on every thread
// of the process (SECCOMP_FILTER_FLAG_TSYNC).
func installSeccomp(allow []uintptr) error {
	if len(allow) > 250 {
		return fmt.Errorf("seccomp: %d syscalls do not fit 8-bit jumps", len(allow))
	}
	f := seccompFilter(allow)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFlagTSync, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: install filter: %w", e)
	}
	return nil
}
