package vmmproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/vmm"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/tailbuf"
)

// A Detached VMM outlives the daemon that launched it; a later daemon
// finds it again from its control socket's path. Launch records who it
// is beside the socket before the process may run (it waits at its
// start gate meanwhile):
//
//	<socket>.pid   {"pid":1234,"start":5678,"boot":"<boot id>"}
//
// pid in the daemon's PID namespace, start its start time
// (/proc/<pid>/stat, clock ticks since boot), boot the kernel's boot id:
// together they name one process for as long as the host runs, where a
// pid alone may have been reused. With <socket>.json (the Config) they
// are all Adopt and EndOrphan read; reap removes all three.
const identitySuffix = ".pid"

// ErrGone is why Adopt found no process: none was recorded, it has
// exited, or its pid now names another process.
var ErrGone = errors.New("vmm process gone")

// identity is the content of <socket>.pid.
type identity struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
	Boot  string `json:"boot"`
}

// identify returns the identity of the live process pid.
func identify(pid int) (identity, error) {
	start, err := procStart(pid)
	if err != nil {
		return identity{}, err
	}
	boot, err := bootID()
	return identity{Pid: pid, Start: start, Boot: boot}, err
}

// procStart is field 22 of /proc/<pid>/stat, the start time; the fields
// are counted after the command name's closing parenthesis (the name
// may hold blanks and parentheses).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}

// writeIdentity records the just-started child pid for socket: temp
// file, rename (a reader sees the whole record or none).
func writeIdentity(socket string, pid int) error {
	id, err := identify(pid)
	if err != nil {
		return fmt.Errorf("identity of pid %d: %w", pid, err)
	}
	b, _ := json.Marshal(id)
	tmp := socket + identitySuffix + ".tmp"
	os.Remove(tmp)
	if err := writeConfig(tmp, append(b, '\n')); err != nil {
		return err
	}
	return os.Rename(tmp, socket+identitySuffix)
}

// readSmall reads a regular file of at most 64 KiB, never through a
// symlink.
func readSmall(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err == nil && len(b) > 64<<10 {
		err = fmt.Errorf("read %s: larger than 64 KiB", path)
	}
	return b, err
}

// recorded reads what Launch left for socket: the Config (zero but for
// Socket if its file is gone or unreadable: the identity alone names the
// process) and the identity (nil if none).
func recorded(socket string) (Config, *identity, error) {
	cfg := Config{}
	if b, err := readSmall(socket + ".json"); err == nil {
		if json.Unmarshal(b, &cfg) != nil {
			cfg = Config{}
		}
	}
	cfg.Socket = socket
	b, err := readSmall(socket + identitySuffix)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil, nil
	}
	var id identity
	if err == nil {
		err = json.Unmarshal(b, &id)
	}
	if err == nil && id.Pid <= 0 {
		err = fmt.Errorf("pid %d", id.Pid)
	}
	if err != nil {
		return cfg, nil, fmt.Errorf("read %s%s: %w", socket, identitySuffix, err)
	}
	return cfg, &id, nil
}

// find returns the recorded process of socket as an adopted Process
// (watched through a pidfd: it is not our child), or an ErrGone error
// after removing what it left (cleanup).
func find(socket string) (*Process, error) {
	cfg, id, err := recorded(socket)
	if err != nil {
		return nil, err
	}
	p := &Process{cfg: cfg, done: make(chan struct{}), exited: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 4096}}
	if cfg.Jail.Cgroup != "" {
		if l, err := cgroup.Detect(); err == nil {
			p.cg, _ = l.Existing(cfg.Jail.Cgroup) // nil for a bad name: nothing to remove
		}
	}
	p.sess = newSession(socket, p.check)
	gone := func(why string) (*Process, error) {
		p.cleanup()
		return nil, fmt.Errorf("%w: %s", ErrGone, why)
	}
	if id == nil {
		return gone("no process recorded")
	}
	fd, err := unix.PidfdOpen(id.Pid, unix.PIDFD_NONBLOCK)
	if err == unix.ESRCH {
		return gone(fmt.Sprintf("pid %d has exited", id.Pid))
	} else if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", id.Pid, err)
	}
	// The pidfd is the process that had pid when it was opened: if that
	// is still the recorded one, it is the one from now on.
	if now, err := identify(id.Pid); err != nil || now != *id {
		unix.Close(fd)
		return gone(fmt.Sprintf("pid %d has exited (it names another process now)", id.Pid))
	}
	if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); n > 0 {
		unix.Close(fd) // a zombie: its parent (init) has not reaped it yet
		return gone(fmt.Sprintf("pid %d has exited", id.Pid))
	}
	p.pid, p.pidfd = id.Pid, os.NewFile(uintptr(fd), "pidfd")
	go p.watch()
	return p, nil
}

// Adopt returns the Process of the Detached VMM that Launch started with
// control socket socket, maybe in another daemon (before a restart), once
// its control answers: its state is then running or paused. Its Config
// is what Launch wrote (<socket>.json), so Config() has no client side
// (Binary, Console, LogFile...). An adopted process's end is seen through
// a pidfd, its exit status is not known (Wait gives ExitStopped after
// Stop, else ExitError); its stderr, which went to the daemon that
// started it, reaches vmm.log again once ReadLog opens its named pipe.
// Adopt never leaves a process behind on error: one whose control does
// not answer by ctx's end is killed, one whose machine has ended is
// stopped; ErrGone says none was found.
func Adopt(ctx context.Context, socket string) (*Process, error) {
	p, err := find(socket)
	if err != nil {
		return nil, fmt.Errorf("adopt: %w", err)
	}
	st, err := p.Status(ctx)
	if err != nil {
		p.Kill() // its control does not answer: a stop would not either
		return nil, fmt.Errorf("adopt: pid %d: %w", p.pid, err)
	}
	if strings.HasPrefix(st, "ended:") {
		p.Stop(context.Background())
		return nil, fmt.Errorf("adopt: pid %d: machine %s", p.pid, st)
	}
	return p, nil
}

// EndOrphan ends the Detached VMM recorded for socket, if one still
// runs (stop, then SIGKILL after DefaultStopTimeout: a stop writes the
// disk layer's map), and removes what it left (cgroup, sockets,
// records). found says whether a process was running.
func EndOrphan(socket string) (found bool, err error) {
	p, err := find(socket)
	if errors.Is(err, ErrGone) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("end orphan: %w", err)
	}
	p.Stop(context.Background())
	return true, nil
}

// watch waits for an adopted process to end (its pidfd turns readable)
// and records why as far as is known.
func (p *Process) watch() {
	waitPidfd(p.pidfd)
	p.reason, p.err = vmm.ExitStopped, nil
	if !p.stopAsked.Load() {
		p.reason, p.err = vmm.ExitError, fmt.Errorf("vmm pid %d ended (adopted after a daemon restart: its exit status is not known)", p.pid)
	}
	close(p.exited)
	p.cleanup()
	p.pidfd.Close()
	close(p.done)
}

// waitPidfd blocks until the process of pidfd f has exited, in the
// runtime's poller (f is non-blocking), not in a thread of its own.
func waitPidfd(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err != unix.EINTR && (n > 0 || err != nil)
	})
}

// signalPidfd sends sig through an adopted process's pidfd (never to a
// pid that may have been reused).
func (p *Process) signalPidfd(sig unix.Signal) {
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { unix.PidfdSendSignal(int(fd), sig, nil, 0) })
}
