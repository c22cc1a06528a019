package vmmproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data (linux/seccomp.h).
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// evalFilter runs the classic BPF program f over d the way the kernel's
// seccomp does, for the instructions seccompProgram emits (ld abs, jeq,
// ret); anything else fails the test.
func evalFilter(t *testing.T, f []unix.SockFilter, d seccompData) uint32 {
	t.Helper()
	var buf [64]byte
	binary.LittleEndian.PutUint32(buf[0:], d.nr)
	binary.LittleEndian.PutUint32(buf[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(buf[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(f); pc++ {
		in := f[pc]
		switch in.Code {
		case bpfLdWAbs:
			acc = binary.LittleEndian.Uint32(buf[in.K:])
		case bpfJeqK:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfRetK:
			return in.K
		default:
			t.Fatalf("instruction %d: code %#x", pc, in.Code)
		}
	}
	t.Fatal("program ran off its end")
	return 0
}

// TestSeccompPolicy runs the VMM's compiled filter over syscalls it must
// allow, refuse with an errno, or kill for.
func TestSeccompPolicy(t *testing.T) {
	f, err := seccompProgram(vmmPolicy())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d instructions", len(f))
	const (
		allow = seccompRetAllow
		kill  = seccompRetKillProcess
		eperm = seccompRetErrno | uint32(unix.EPERM)
	)
	x86 := uint32(auditArchX8664)
	for _, tc := range []struct {
		name string
		d    seccompData
		want uint32
	}{
		{"read", seccompData{nr: unix.SYS_READ, arch: x86}, allow},
		{"futex", seccompData{nr: unix.SYS_FUTEX, arch: x86}, allow},
		{"openat", seccompData{nr: unix.SYS_OPENAT, arch: x86}, allow},
		{"ptrace", seccompData{nr: unix.SYS_PTRACE, arch: x86}, kill},
		{"mount", seccompData{nr: unix.SYS_MOUNT, arch: x86}, kill},
		{"execve", seccompData{nr: unix.SYS_EXECVE, arch: x86}, kill},
		{"symlinkat", seccompData{nr: unix.SYS_SYMLINKAT, arch: x86}, kill},
		{"socketpair", seccompData{nr: unix.SYS_SOCKETPAIR, arch: x86}, kill},
		{"read, i386 arch", seccompData{nr: unix.SYS_READ, arch: 0x40000003}, kill},
		{"read, x32 number", seccompData{nr: 0x40000000 | unix.SYS_READ, arch: x86}, kill},
		{"ioctl KVM_RUN", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{7, 0xae80}}, allow},
		{"ioctl KVM_IRQ_LINE", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{7, 0x4008ae61}}, allow},
		{"ioctl KVM_CREATE_VM", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{7, 0xae01}}, eperm},
		{"ioctl KVM_SET_USER_MEMORY_REGION", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{7, 0x4020ae46}}, eperm},
		{"ioctl TIOCSTI", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{2, unix.TIOCSTI}}, eperm},
		{"ioctl TUNSETIFF", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{5, unix.TUNSETIFF}}, eperm},
		{"ioctl FICLONE", seccompData{nr: unix.SYS_IOCTL, arch: x86, args: [6]uint64{5, unix.FICLONE}}, eperm},
		{"socket AF_UNIX", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}}, allow},
		{"socket AF_INET", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM}}, eperm},
		{"socket AF_INET6", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM}}, eperm},
		{"socket AF_NETLINK", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}}, eperm},
		{"socket AF_VSOCK", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}}, eperm},
		{"socket AF_PACKET", seccompData{nr: unix.SYS_SOCKET, arch: x86, args: [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}}, eperm},
		{"clone, Go thread", seccompData{nr: unix.SYS_CLONE, arch: x86, args: [6]uint64{goThreadFlags}}, allow},
		{"clone, glibc thread", seccompData{nr: unix.SYS_CLONE, arch: x86, args: [6]uint64{glibcThreadFlags}}, allow},
		{"clone, fork", seccompData{nr: unix.SYS_CLONE, arch: x86, args: [6]uint64{uint64(unix.SIGCHLD)}}, eperm},
		{"clone, thread in a new user namespace", seccompData{nr: unix.SYS_CLONE, arch: x86, args: [6]uint64{goThreadFlags | unix.CLONE_NEWUSER}}, eperm},
		{"clone, thread flags with high bits", seccompData{nr: unix.SYS_CLONE, arch: x86, args: [6]uint64{1<<32 | goThreadFlags}}, eperm},
		{"clone3", seccompData{nr: unix.SYS_CLONE3, arch: x86}, seccompRetErrno | uint32(unix.ENOSYS)},
		{"prctl PR_SET_VMA", seccompData{nr: unix.SYS_PRCTL, arch: x86, args: [6]uint64{unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME}}, allow},
		{"prctl PR_SET_DUMPABLE", seccompData{nr: unix.SYS_PRCTL, arch: x86, args: [6]uint64{unix.PR_SET_DUMPABLE, 1}}, eperm},
	} {
		if got := evalFilter(t, f, tc.d); got != tc.want {
			t.Errorf("%s: filter returns %#x; want %#x", tc.name, got, tc.want)
		}
	}
}

// TestSeccompAssemblerJumps: a jump beyond 255 instructions is an error,
// not a silently truncated offset.
func TestSeccompAssemblerJumps(t *testing.T) {
	var a bpfAsm
	a.jeq(1, "far", "")
	for i := 0; i < 300; i++ {
		a.ret(seccompRetKillProcess)
	}
	a.label("far")
	a.ret(seccompRetAllow)
	if _, err := a.assemble(); err == nil {
		t.Fatal("assemble accepted a 300-instruction jump")
	}
}

// seccompChild runs in a re-executed test binary: install the VMM's
// filter, exercise the Go runtime (new threads go through the clone
// rule), check that the argument rules refuse, then make a forbidden
// syscall.
func seccompChild() {
	if err := installSeccomp(vmmPolicy()); err != nil {
		fmt.Println("install:", err)
		os.Exit(3)
	}
	// Goroutines locked to their threads while others run: the runtime
	// must start new threads under the filter.
	// They stay locked until counted: a goroutine that exits locked takes
	// its thread with it, so counting after they end raced with that.
	ready, release := make(chan int), make(chan struct{})
	for i := 0; i < 8; i++ {
		go func() {
			runtime.LockOSThread()
			b := make([]byte, 1<<20)
			ready <- len(b)
			<-release
		}()
	}
	for i := 0; i < 8; i++ {
		<-ready
	}
	if n := threads(); n < 8 {
		fmt.Println("only", n, "threads")
	}
	close(release)
	f, err := os.CreateTemp("", "seccomp")
	if err == nil {
		f.Write([]byte("x"))
		f.Close()
		os.Remove(f.Name())
	}
	fmt.Println("alive")
	if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); err != nil {
		fmt.Println("AF_UNIX refused:", err)
	} else {
		unix.Close(fd)
	}
	for name, e := range map[string]error{
		"socket AF_INET":   sockErr(unix.AF_INET),
		"socket AF_INET6":  sockErr(unix.AF_INET6),
		"clone fork":       rawErr(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0),
		"clone newuser":    rawErr(unix.SYS_CLONE, goThreadFlags|unix.CLONE_NEWUSER, 0, 0),
		"ioctl TIOCGWINSZ": rawErr(unix.SYS_IOCTL, 1, unix.TIOCGWINSZ, 0),
		"clone3":           rawErr(unix.SYS_CLONE3, 0, 0, 0),
		"prctl dumpable":   rawErr(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1, 0),
	} {
		fmt.Printf("refused %s: %v\n", name, e)
	}
	// What the runtime does at each new mapping where the kernel can name
	// them: it must come back (EINVAL where it cannot), never kill.
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		fmt.Println("mmap:", err)
	}
	name := []byte("Go: test\x00")
	_, _, e := unix.Syscall6(unix.SYS_PRCTL, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, uintptr(unsafe.Pointer(&b[0])), 4096, uintptr(unsafe.Pointer(&name[0])), 0)
	fmt.Printf("prctl PR_SET_VMA came back: %v\n", e)
	os.Stdout.Sync()
	unix.Syscall(unix.SYS_PTRACE, 0, 0, 0) // not allowed
	fmt.Println("survived")
	os.Exit(0)
}

// threads counts the process's threads.
func threads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(l, "Threads:\t"); ok {
			v, _ := strconv.Atoi(n)
			return v
		}
	}
	return 0
}

func sockErr(domain int) error {
	fd, err := unix.Socket(domain, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func rawErr(nr, a, b, c uintptr) error {
	if _, _, e := unix.RawSyscall(nr, a, b, c); e != 0 {
		return e
	}
	return nil
}

// TestSeccompKillsForbiddenSyscall installs the filter in a child: Go
// code runs, AF_UNIX sockets work, other families, new processes or
// namespaces, ioctls outside the KVM list and clone3 fail with their
// errno, and ptrace kills it with SIGSYS.
func TestSeccompKillsForbiddenSyscall(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDFS_TEST_SECCOMP=1")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "alive") {
		t.Fatalf("filtered process did not run Go code: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "survived") {
		t.Fatalf("forbidden syscall did not kill the process:\n%s", out)
	}
	for _, want := range []string{
		"refused socket AF_INET: operation not permitted",
		"refused socket AF_INET6: operation not permitted",
		"refused clone fork: operation not permitted",
		"refused clone newuser: operation not permitted",
		"refused ioctl TIOCGWINSZ: operation not permitted",
		"refused clone3: function not implemented",
		"refused prctl dumpable: operation not permitted",
		"prctl PR_SET_VMA came back",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "AF_UNIX refused") || strings.Contains(string(out), "only") {
		t.Errorf("AF_UNIX socket refused:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v; want a signal exit", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("exit = %v; want killed by SIGSYS", ws)
	}
}
