package vmm

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// File descriptors a VMM process inherits from Launch.
const (
	fdControl = 3 // listening unix socket: the control protocol
	fdConsole = 4 // console log, opened for append (optional)
	fdTap     = 5 // tap device (optional)
	fdGate    = 6 // start gate, with -gate: read end of a pipe; wait for a byte (cgroup v1)
)

// Process exit codes; Process.Wait maps them back to ExitReason.
const (
	codeStopped  = 0
	codeError    = 1
	codeUsage    = 2
	codeReset    = 10
	codePoweroff = 11
	codeCrash    = 12
)

func exitCode(r ExitReason) int {
	switch r {
	case ExitStopped:
		return codeStopped
	case ExitReset:
		return codeReset
	case ExitPoweroff:
		return codePoweroff
	case ExitCrash:
		return codeCrash
	}
	return codeError
}

// Main is `sandfs vmm`: run one VM from -config, serving the control
// protocol on fd 3. It returns the process exit code. (`sandfs vmm
// guest-init` and `sandfs vmm bench`, the benchmark guest's init and the
// benchmark, are dispatched before it, in tools/sandfs/cmd_vmm.go.)
func Main(args []string) int {
	fs := flag.NewFlagSet("vmm", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "JSON config file (vmm.Config)")
	console := fs.Bool("console", false, "fd 4 is the console log (Launch passes it; without the flag fd 4 may be the Go runtime's own)")
	gate := fs.Bool("gate", false, "first wait for one byte on fd 6 (Launch moves the process into its cgroup v1 group meanwhile)")
	if err := fs.Parse(args); err != nil {
		return codeUsage
	}
	// A vanished log reader must not kill the VM (stderr is a pipe).
	signal.Ignore(syscall.SIGPIPE)
	// The guest provokes some of the VMM's log lines (logging.go): rate-limit
	// them; the virtio devices log through the default logger.
	log := newLogger(os.Stderr, time.Now)
	slog.SetDefault(log)
	if *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "usage: sandfs vmm -config FILE | guest-init | bench")
		return codeUsage
	}
	cfg, err := ReadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmm: %v\n", err)
		return codeUsage
	}
	reason, err := run(cfg, log, *console, *gate)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmm: %v\n", err)
	}
	fmt.Fprintf(os.Stderr, "vmm: exit reason=%s\n", reason)
	return exitCode(reason)
}

// run builds, starts and serves the machine until it ends; with gate, it
// first waits at the start gate (waitGate); with console, fd 4 is the
// console log. Like the gate, the console is announced, not guessed from
// fd 4 being open: without one, the Go runtime may have put its own
// epoll fd there.
func run(cfg *Config, log *slog.Logger, console, gate bool) (ExitReason, error) {
	if gate {
		if err := waitGate(); err != nil {
			return ExitError, err
		}
	}
	var out io.Writer
	if console {
		f := inheritedFile(fdConsole, "console")
		if f == nil {
			return ExitError, fmt.Errorf("console: fd %d is not open", fdConsole)
		}
		out = capFile(f, ConsoleMax, "\n[sandfs: console output truncated]\n")
	}
	mc := MachineConfig{MemBytes: cfg.MemBytes, CPUs: cfg.CPUs, Cmdline: cfg.Cmdline,
		Console: out, Log: log}
	if cfg.Restore == "" {
		var err error
		// Mapped, not read: the VMM's heap would otherwise keep both
		// images (~7 MB) for its whole life.
		if mc.Kernel, err = mapFile(cfg.Kernel); err != nil {
			return ExitError, fmt.Errorf("read kernel: %w", err)
		}

		if cfg.Initrd != "" {
			if mc.Initrd, err = mapFile(cfg.Initrd); err != nil {
				return ExitError, fmt.Errorf("read initrd: %w", err)
			}
		}
	}
	if cfg.Jail.Root != "" {
		// The jail has no /proc; SaveMemory reads the pagemap.
		if cfg.Restore == "" {
			pm, err := os.Open("/proc/self/pagemap")
			if err != nil {
				return ExitError, err
			}
			mc.Pagemap = pm
		}
		// From here on every path resolves in the jail (jail.go): the
		// snapshot, the disks, the vsock socket.
		if err := enterJail(cfg); err != nil {
			return ExitError, err
		}
	}
	var st *State
	if cfg.Restore != "" {
		var err error
		if st, err = LoadState(cfg.Restore); err != nil {
			return ExitError, err
		}
		mc.MemFile = cfg.Restore + "/" + MemoryFile
	}
	m, err := NewMachine(mc)
	if err != nil {
		return ExitError, err
	}
	defer m.Close()
	if err := addDevices(m, cfg); err != nil {
		return ExitError, err
	}
	ln, err := controlListener()
	if err != nil {
		return ExitError, err
	}
	// Everything is open: give up privileges before the guest runs.
	if err := confineSelf(cfg); err != nil {
		return ExitError, err
	}
	if st != nil {
		if err := m.Restore(st); err != nil {
			return ExitError, err
		}
		if !cfg.StartPaused {
			if err := m.Resume(); err != nil {
				return ExitError, err
			}
		}
	} else if err := m.Start(); err != nil {
		return ExitError, err
	} else {
		// Loaded into guest RAM: drop the images now.
		unix.Munmap(mc.Kernel) // (on error paths the process exits anyway)
		if mc.Initrd != nil {
			unix.Munmap(mc.Initrd)
		}
		m.cfg.Kernel, m.cfg.Initrd = nil, nil
	}
	srv := &controlServer{m: m, cfg: cfg, stopped: make(chan struct{})}
	go srv.serve(ln)
	reason, err := m.Wait()
	if reason == ExitStopped {
		select { // let the stop request's reply go out
		case <-srv.stopped:
		case <-time.After(time.Second):
		}
	}
	return reason, err
}

// inheritedFile returns fd if the process inherited it open.
func inheritedFile(fd int, name string) *os.File {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), name)
}

func controlListener() (net.Listener, error) {
	f := inheritedFile(fdControl, "control")
	if f == nil {
		return nil, fmt.Errorf("control: fd %d is not open (start the VMM with vmm.Launch)", fdControl)
	}
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("control: fd %d: %w", fdControl, err)
	}
	return ln, nil
}

// mapFile maps a whole file read-only.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
}
