package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Confinement, after Firecracker's jailer: Launch puts the process in new
// mount, PID and IPC namespaces and a cgroup v2 with memory/CPU/PID limits;
// the process, once /dev/kvm, guest RAM, disks and sockets are open, makes
// its mounts private, drops to an unprivileged uid/gid and installs a
// seccomp allowlist whose violations kill it (SECCOMP_RET_KILL_PROCESS).

const cgroupRoot = "/sys/fs/cgroup"

// setupCgroup creates cfg.Jail.Cgroup under /sys/fs/cgroup with the limits
// and returns its path and an O_DIRECTORY fd for CLONE_INTO_CGROUP.
func setupCgroup(cfg *Config) (string, int, error) {
	j := cfg.Jail
	if strings.Contains(j.Cgroup, "..") || filepath.IsAbs(j.Cgroup) {
		return "", -1, fmt.Errorf("cgroup: bad name %q", j.Cgroup)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return "", -1, fmt.Errorf("cgroup: no cgroup v2 at %s: %w", cgroupRoot, err)
	}
	// Enable the controllers down the path (the leaf's parents hold no
	// processes, so this is allowed by the no-internal-process rule).
	dir := cgroupRoot
	parts := strings.Split(filepath.Clean(j.Cgroup), "/")
	for i, part := range parts {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0); err != nil {
			return "", -1, fmt.Errorf("cgroup: enable controllers in %s: %w", dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !(os.IsExist(err) && i < len(parts)-1) {
			return "", -1, fmt.Errorf("cgroup: %w", err)
		}
	}
	mem := j.MemMax
	if mem == 0 {
		mem = cfg.MemBytes + 128<<20
	}
	cpu := j.CPUMax
	if cpu == 0 {
		cpu = 100 * cfg.CPUs
	}
	pids := j.PidsMax
	if pids == 0 {
		pids = 64
	}
	for file, v := range map[string]string{
		"memory.max": strconv.FormatUint(mem, 10),
		"pids.max":   strconv.Itoa(pids),
		"cpu.max":    fmt.Sprintf("%d 100000", cpu*1000),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			os.Remove(dir)
			return "", -1, fmt.Errorf("cgroup: %s: %w", file, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return "", -1, fmt.Errorf("cgroup: %w", err)
	}
	return dir, fd, nil
}

func (p *Process) removeCgroup() {
	if p.cgroup != "" {
		os.Remove(p.cgroup) // rmdir: empty once the process is reaped
	}
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
