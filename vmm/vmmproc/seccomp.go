package vmmproc

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"sandfs/vmm"
	"sandfs/vmm/kvm"
)

// The VMM's seccomp filter, installed once everything is open (confineSelf).
// Three kinds of rule, after Firecracker's per-argument filters
// (resources/seccomp/x86_64-unknown-linux-musl.json):
//
//   - syscalls allowed with any arguments (vmmPolicy.allow);
//   - syscalls allowed only with certain values of one argument (argRule):
//     socket only for AF_UNIX, clone only with the Go runtime's thread
//     flags (or glibc's, in cgo builds), ioctl only with the KVM requests
//     the running VMM issues; other values fail with EPERM, so the VMM
//     (and a test playing a compromised one) sees the refusal;
//   - clone3 fails with ENOSYS: its flags are in memory, out of a filter's
//     reach, and callers fall back to clone (glibc does; Go uses clone).
//
// Every other syscall, and any from another architecture (x32 included),
// kills the process (SECCOMP_RET_KILL_PROCESS).

// Seccomp constants (linux/seccomp.h, linux/audit.h, linux/filter.h).
const (
	seccompSetModeFilter  = 1          // SECCOMP_SET_MODE_FILTER
	seccompFlagTSync      = 1          // SECCOMP_FILTER_FLAG_TSYNC
	seccompRetKillProcess = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	seccompRetErrno       = 0x00050000 // SECCOMP_RET_ERRNO, errno in the low 16 bits
	seccompRetAllow       = 0x7fff0000 // SECCOMP_RET_ALLOW
	auditArchX8664        = 0xc000003e // AUDIT_ARCH_X86_64
	bpfLdWAbs             = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK               = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfRetK               = unix.BPF_RET | unix.BPF_K
	// struct seccomp_data: nr, arch, instruction_pointer, args[6]
	// (little-endian: an argument's low half first).
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArgs = 16
)

// goThreadFlags are the clone flags of the Go runtime's new threads
// (runtime/os_linux.go, cloneFlags): CLONE_VM | CLONE_FS | CLONE_FILES |
// CLONE_SIGHAND | CLONE_SYSVSEM | CLONE_THREAD, to which runtime·clone
// (sys_linux_amd64.s) adds CLONE_SETTLS for every thread with an m. Anything
// else (a new process, new namespaces, CLONE_NEWUSER) is refused.
const goThreadFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
	unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS

// glibcThreadFlags are pthread_create's (glibc
// sysdeps/unix/sysv/linux/createthread.c, clone_flags), for cgo builds
// such as the host's test binaries: the Go flags plus
// CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID (after clone3's ENOSYS).
const glibcThreadFlags = goThreadFlags | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID

// argRule allows syscall nr only when the low 32 bits of argument arg
// are one of values (and, with high0, its high 32 bits are zero); any
// other value fails with errno.
type argRule struct {
	name   string
	nr     uintptr
	arg    int
	high0  bool
	values []uint32
	errno  unix.Errno
}

// seccompPolicy is what seccompProgram compiles.
type seccompPolicy struct {
	allow  []uintptr              // any arguments
	args   []argRule              // some arguments
	errnos map[uintptr]unix.Errno // refused with this errno, never run
}

// vmmPolicy is the VMM's policy after setup.
func vmmPolicy() seccompPolicy {
	return seccompPolicy{
		allow: allowedSyscalls,
		args: []argRule{
			// ioctl(fd, request): request is an unsigned int in the
			// kernel (the high half of the register is ignored).
			{name: "ioctl", nr: unix.SYS_IOCTL, arg: 1, values: runtimeIoctls(), errno: unix.EPERM},
			// socket(domain, ...): domain is an int.
			{name: "socket", nr: unix.SYS_SOCKET, arg: 0, values: []uint32{unix.AF_UNIX}, errno: unix.EPERM},
			// clone(flags, ...): flags is an unsigned long.
			{name: "clone", nr: unix.SYS_CLONE, arg: 0, high0: true, values: []uint32{goThreadFlags, goThreadFlags &^ unix.CLONE_SETTLS, glibcThreadFlags}, errno: unix.EPERM},
			// prctl(option, ...): since Go 1.25 the runtime names each
			// new anonymous mapping (heap growth, stacks) with
			// PR_SET_VMA where the kernel has CONFIG_ANON_VMA_NAME
			// (runtime/set_vma_name_linux.go): refusing it by kill would
			// end the VMM at its first heap growth on such a host.
			// Naming a mapping is harmless; no other option is needed.
			{name: "prctl", nr: unix.SYS_PRCTL, arg: 0, values: []uint32{unix.PR_SET_VMA}, errno: unix.EPERM},
		},
		errnos: map[uintptr]unix.Errno{unix.SYS_CLONE3: unix.ENOSYS},
	}
}

// setupIoctls are KVM requests the VMM issues only while building the
// machine (NewMachine), before the filter is installed; a running VMM has
// no use for a new VM, vCPU, irqchip or memory slot.
var setupIoctls = map[string]bool{
	"KVM_GET_API_VERSION": true, "KVM_CREATE_VM": true, "KVM_GET_VCPU_MMAP_SIZE": true,
	"KVM_CREATE_VCPU": true, "KVM_SET_USER_MEMORY_REGION": true, "KVM_SET_TSS_ADDR": true,
	"KVM_SET_IDENTITY_MAP_ADDR": true, "KVM_CREATE_IRQCHIP": true, "KVM_CREATE_PIT2": true,
}

// runtimeIoctls are the ioctl requests a running VMM issues: the KVM
// requests (vmm/kvm) other than setupIoctls, KVM_RUN first (the hot one),
// and PAGEMAP_SCAN on its own pagemap file (a snapshot's soft-dirty scan,
// vmm/pagescan.go; no other file the VMM holds takes that number). None
// for tun (the host configures the tap before passing it; the device only
// reads and writes it) or vsock (hybrid: unix sockets).
func runtimeIoctls() []uint32 {
	v := []uint32{uint32(vmm.PagemapScanIoctl)}
	for _, r := range kvm.Requests {
		if setupIoctls[r.Name] {
			continue
		}
		if r.Name == "KVM_RUN" {
			v = append([]uint32{uint32(r.Nr)}, v...)
		} else {
			v = append(v, uint32(r.Nr))
		}
	}
	return v
}

// allowedSyscalls is what the VMM needs after setup with any arguments:
// the Go runtime (threads, signals, timers, netpoller), device I/O on
// open fds, the control socket, and snapshot files. ioctl, socket and
// clone are argRules in vmmPolicy.
var allowedSyscalls = []uintptr{
	// Go runtime.
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_MMAP, unix.SYS_MUNMAP,
	unix.SYS_MPROTECT, unix.SYS_MADVISE, unix.SYS_BRK, unix.SYS_RT_SIGACTION,
	unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_SIGALTSTACK,
	unix.SYS_EXIT, unix.SYS_EXIT_GROUP, unix.SYS_FUTEX,
	unix.SYS_NANOSLEEP, unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_GETTIMEOFDAY,
	unix.SYS_SCHED_YIELD, unix.SYS_SCHED_GETAFFINITY, unix.SYS_GETPID, unix.SYS_GETTID,
	unix.SYS_TGKILL, unix.SYS_TKILL, unix.SYS_GETRANDOM, unix.SYS_RESTART_SYSCALL,
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_WAIT,
	unix.SYS_EVENTFD2, unix.SYS_PIPE2, unix.SYS_FCNTL, unix.SYS_PRLIMIT64, unix.SYS_UNAME,
	unix.SYS_SETITIMER, unix.SYS_TIMER_CREATE, unix.SYS_TIMER_SETTIME, unix.SYS_TIMER_DELETE,
	unix.SYS_GETUID, unix.SYS_GETEUID, unix.SYS_GETGID, unix.SYS_GETEGID, unix.SYS_MINCORE,
	// glibc threads (cgo builds): rseq and robust futex lists on each new thread.
	unix.SYS_RSEQ, unix.SYS_SET_ROBUST_LIST, unix.SYS_EPOLL_PWAIT2, unix.SYS_MEMBARRIER,
	// Device I/O.
	unix.SYS_PREAD64, unix.SYS_PWRITE64, unix.SYS_READV, unix.SYS_WRITEV,
	unix.SYS_PREADV, unix.SYS_PWRITEV, unix.SYS_LSEEK, unix.SYS_FSYNC, unix.SYS_FDATASYNC,
	unix.SYS_FALLOCATE, unix.SYS_FTRUNCATE, unix.SYS_COPY_FILE_RANGE, unix.SYS_DUP, unix.SYS_DUP3,
	// Sockets (control, hybrid vsock); socket itself is AF_UNIX only.
	unix.SYS_CONNECT, unix.SYS_ACCEPT4, unix.SYS_BIND, unix.SYS_LISTEN,
	unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME, unix.SYS_SETSOCKOPT, unix.SYS_GETSOCKOPT,
	unix.SYS_SHUTDOWN, unix.SYS_RECVFROM, unix.SYS_SENDTO, unix.SYS_RECVMSG, unix.SYS_SENDMSG,
	// Files: snapshots, the disk map (inside the jail).
	unix.SYS_OPENAT, unix.SYS_FSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX, unix.SYS_MKDIRAT,
	unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_UNLINKAT, unix.SYS_GETDENTS64,
	unix.SYS_READLINKAT, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2, unix.SYS_FCHMOD, unix.SYS_FCHOWN,
	// snapshot.Write starts its files' writeback before their fsyncs.
	unix.SYS_SYNC_FILE_RANGE,
}

// bpfAsm assembles classic BPF with forward jumps to labels.
type bpfAsm struct {
	ins    []unix.SockFilter
	labels map[string]int
	jumps  []bpfJump
}

type bpfJump struct {
	at     int
	jt, jf string // "" falls through
}

func (a *bpfAsm) load(off uint32) { a.ins = append(a.ins, unix.SockFilter{Code: bpfLdWAbs, K: off}) }
func (a *bpfAsm) ret(k uint32)    { a.ins = append(a.ins, unix.SockFilter{Code: bpfRetK, K: k}) }

// jeq jumps to jt if A == k, else to jf ("" for the next instruction).
func (a *bpfAsm) jeq(k uint32, jt, jf string) {
	a.jumps = append(a.jumps, bpfJump{at: len(a.ins), jt: jt, jf: jf})
	a.ins = append(a.ins, unix.SockFilter{Code: bpfJeqK, K: k})
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

// assemble resolves the jumps; a target behind the jump or more than 255
// instructions ahead is an error (cBPF jumps are 8-bit and forward).
func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	off := func(at int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := a.labels[l]
		if !ok {
			return 0, fmt.Errorf("seccomp: no label %q", l)
		}
		d := to - at - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: jump to %q is %d instructions", l, d)
		}
		return uint8(d), nil
	}
	for _, j := range a.jumps {
		var err error
		if a.ins[j.at].Jt, err = off(j.at, j.jt); err != nil {
			return nil, err
		}
		if a.ins[j.at].Jf, err = off(j.at, j.jf); err != nil {
			return nil, err
		}
	}
	if len(a.ins) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: %d instructions", len(a.ins))
	}
	return a.ins, nil
}

// seccompProgram compiles p:
//
//	     ld arch; jeq X86_64 else kill
//	     ld nr
//	     jeq <each argRule's nr>  → rule<i>
//	     jeq <each errno syscall> → errno<nr>
//	     jeq <each allowed nr>    → allow
//	kill: ret KILL_PROCESS
//	allow: ret ALLOW
//	rule<i>: [ld arg.hi; jeq 0 else deny<i>] ld arg.lo; jeq <values> → ok<i>
//	deny<i>: ret ERRNO(errno)
//	ok<i>:   ret ALLOW
//	errno<nr>: ret ERRNO(errno)
func seccompProgram(p seccompPolicy) ([]unix.SockFilter, error) {
	var a bpfAsm
	a.load(seccompDataArch)
	a.jeq(auditArchX8664, "", "kill")
	a.load(seccompDataNr)
	for i, r := range p.args {
		a.jeq(uint32(r.nr), fmt.Sprint("rule", i), "")
	}
	errnoNrs := slices.Sorted(maps.Keys(p.errnos))
	for _, nr := range errnoNrs {
		a.jeq(uint32(nr), fmt.Sprint("errno", nr), "")
	}
	for _, nr := range p.allow {
		a.jeq(uint32(nr), "allow", "")
	}
	a.label("kill")
	a.ret(seccompRetKillProcess)
	a.label("allow")
	a.ret(seccompRetAllow)
	for i, r := range p.args {
		a.label(fmt.Sprint("rule", i))
		lo := uint32(seccompDataArgs + 8*r.arg)
		if r.high0 {
			a.load(lo + 4)
			a.jeq(0, "", fmt.Sprint("deny", i))
		}
		a.load(lo)
		for _, v := range r.values {
			a.jeq(v, fmt.Sprint("ok", i), "")
		}
		a.label(fmt.Sprint("deny", i))
		a.ret(seccompRetErrno | uint32(r.errno))
		a.label(fmt.Sprint("ok", i))
		a.ret(seccompRetAllow)
	}
	for _, nr := range errnoNrs {
		a.label(fmt.Sprint("errno", nr))
		a.ret(seccompRetErrno | uint32(p.errnos[nr]))
	}
	return a.assemble()
}

// installSeccomp sets no_new_privs and installs p on every thread of the
// process (SECCOMP_FILTER_FLAG_TSYNC).
func installSeccomp(p seccompPolicy) error {
	f, err := seccompProgram(p)
	if err != nil {
		return err
	}
	// no_new_privs is a thread's: the seccomp call must come from the
	// thread that set it (TSYNC then gives it to every other). Without the
	// lock the goroutine could move between the two calls, and a thread
	// without it and, after setresuid, without CAP_SYS_ADMIN gets EACCES:
	// "install filter: permission denied" (seen in the lab under load, a
	// clone's VMM failing to start).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFlagTSync, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: install filter: %w", e)
	}
	return nil
}
