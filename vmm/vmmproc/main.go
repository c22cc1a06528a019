package vmmproc

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/snapshot"
	"sandfs/vmm"
	"sandfs/vmm/virtio/blk"
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

func exitCode(r vmm.ExitReason) int {
	switch r {
	case vmm.ExitStopped:
		return codeStopped
	case vmm.ExitReset:
		return codeReset
	case vmm.ExitPoweroff:
		return codePoweroff
	case vmm.ExitCrash:
		return codeCrash
	}
	return codeError
}

// Main is `sandfs vmm`: run one VM from -config, serving the control
// protocol on fd 3. It returns the process exit code. (`sandfs vmm
// guest-init` and `sandfs vmm bench`, the benchmark guest's init and the
// benchmark, are dispatched before it, in tools/sandfs/cmd_vmm.go.)
func Main(args []string) int {
	if len(args) == 2 && args[0] == spareArg {
		// A spare (spare.go): its arguments and descriptors come later.
		a, err := awaitHandoff()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vmm: %v\n", err)
			return codeUsage
		}
		retitle(a)
		args = a
	}
	fs := flag.NewFlagSet("vmm", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "JSON config file (vmmproc.Config)")
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
	closeStrays(*console, *gate, cfg)
	useTSCClock()
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
// epoll fd there. The order matters: the jail is entered before anything
// in it is opened (build), privileges are dropped once everything is
// open and before the guest runs.
// Where its start's time went is logged ("vmm: started", phases), as a
// snapshot's is.
func run(cfg *Config, log *slog.Logger, console, gate bool) (vmm.ExitReason, error) {
	var tm snapshot.Timing
	t := snapshot.Now()
	if gate {
		if err := waitGate(); err != nil {
			return vmm.ExitError, err
		}
		tm.Mark("gate", &t)
	}
	m, img, st, cows, err := build(cfg, log, console, &tm, &t)
	if err != nil {
		return vmm.ExitError, err
	}
	defer m.Close()
	ln, err := controlListener()
	if err != nil {
		return vmm.ExitError, err
	}
	if err := confineSelf(cfg); err != nil {
		return vmm.ExitError, err
	}
	tm.Mark("confine", &t)
	if err := start(m, cfg, img, st); err != nil {
		return vmm.ExitError, err
	}
	tm.Mark("start", &t)
	log.Info("vmm: started", "restore", cfg.Restore != "", "phases", tm.String())
	return serve(diskMachine{m, cows}, cfg, log, ln)
}

// images are the kernel and initrd, mapped (not read: the VMM's heap
// would otherwise keep both, ~7 MB, for its whole life) until Start has
// loaded them into guest RAM.
type images struct{ kernel, initrd []byte }

func (i images) unmap() {
	for _, b := range [][]byte{i.kernel, i.initrd} {
		if b != nil {
			unix.Munmap(b) // (on error paths the process exits anyway)
		}
	}
}

// build makes cfg's machine with its devices, not started: for a boot,
// with the images it will load; for a restore, with the state to restore;
// and its copy-on-write disks (addDevices).
// A jailed process enters its jail here, before it opens anything in it.
// Its steps are marked in tm (from *t).
func build(cfg *Config, log *slog.Logger, console bool, tm *snapshot.Timing, t *snapshot.Stamp) (*vmm.Machine, images, *vmm.State, []*blk.COW, error) {
	var img images
	mc := vmm.MachineConfig{MemBytes: cfg.MemBytes, CPUs: cfg.CPUs, Cmdline: cfg.Cmdline, Log: log}
	if console {
		f := inheritedFile(fdConsole, "console")
		if f == nil {
			return nil, img, nil, nil, fmt.Errorf("console: fd %d is not open", fdConsole)
		}
		mc.Console = capFile(f, ConsoleMax, "\n[sandfs: console output truncated]\n")
	}
	if cfg.Restore == "" {
		var err error
		if img.kernel, err = mapFile(cfg.Kernel); err != nil {
			return nil, img, nil, nil, fmt.Errorf("read kernel: %w", err)
		}
		if cfg.Initrd != "" {
			if img.initrd, err = mapFile(cfg.Initrd); err != nil {
				return nil, img, nil, nil, fmt.Errorf("read initrd: %w", err)
			}
		}
		mc.Kernel, mc.Initrd = img.kernel, img.initrd
	}
	if cfg.Jail.Root != "" {
		// The jail has no /proc: the pagemap (full snapshots of fresh RAM,
		// soft-dirty) and clear_refs (soft-dirty's re-arm) are opened
		// here, for boots and restores alike. Without clear_refs (a host
		// without it) the machine tracks with KVM's dirty log.
		pm, err := os.Open("/proc/self/pagemap")
		if err != nil {
			return nil, img, nil, nil, err
		}
		mc.Pagemap = pm
		if cr, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0); err == nil {
			mc.ClearRefs = cr
		}
		// From here on every path resolves in the jail (jail.go): the
		// snapshot, the disks, the vsock socket.
		if err := enterJail(cfg); err != nil {
			return nil, img, nil, nil, err
		}
		if err := checkRestoreChain(cfg); err != nil {
			return nil, img, nil, nil, err
		}
		tm.Mark("jail", t)
	}
	if cfg.Vsock != nil {
		// Sockets too long for a sockaddr_un (107 bytes: a sandbox's
		// directory may take more) are named relative to their
		// directory (vsockName); the jail has no /proc for package
		// uds's way round that.
		if err := unix.Chdir(filepath.Dir(cfg.Vsock.UDS)); err != nil {
			return nil, img, nil, nil, fmt.Errorf("vsock: %w", err)
		}
	}
	var st *vmm.State
	if cfg.Restore != "" {
		var err error
		if st, err = vmm.LoadState(cfg.Restore); err != nil {
			return nil, img, nil, nil, err
		}
		mc.MemFile = cfg.Restore + "/" + vmm.MemoryFile
		tm.Mark("state", t)
	}
	m, err := vmm.NewMachine(mc)
	if err != nil {
		return nil, img, nil, nil, err
	}
	tm.Mark("machine", t)
	cows, err := addDevices(m, cfg)
	if err != nil {
		m.Close()
		return nil, img, nil, nil, err
	}
	tm.Mark("devices", t)
	return m, img, st, cows, nil
}

// start boots the machine from img, or restores st (and resumes it unless
// cfg.StartPaused).
func start(m *vmm.Machine, cfg *Config, img images, st *vmm.State) error {
	if st == nil {
		if err := m.Start(); err != nil {
			return err
		}
		img.unmap() // loaded into guest RAM
		return nil
	}
	if err := m.Restore(st); err != nil {
		return err
	}
	if cfg.StartPaused {
		return nil
	}
	return m.Resume()
}

// serve serves the control tree until the machine ends.
func serve(m diskMachine, cfg *Config, log *slog.Logger, ln net.Listener) (vmm.ExitReason, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newControl(m, cfg, log)
	hungUp := c.serve(ctx, ln)
	reason, err := m.Wait()
	select {
	case <-c.stopped:
		hungUp() // let the stop write's reply go out
	default:
	}
	return reason, err
}

// closeStrays closes the descriptors this process inherited that Launch
// did not hand it (fdControl, and fdConsole, fdTap, fdGate when
// announced): a daemon's descriptor that lacked close-on-exec would
// otherwise live as long as the VMM, which outlives the daemon when
// Detached. (go-fuse's direct mount leaves /dev/fuse without it: a VMM
// holding it kept a killed daemon's mount alive, every access to it
// hanging.) The Go runtime's own descriptors are close-on-exec and stay.
func closeStrays(console, gate bool, cfg *Config) {
	keep := map[int]bool{0: true, 1: true, 2: true, fdControl: true, fdConsole: console, fdGate: gate}
	if cfg.Net != nil {
		keep[cfg.Net.TapFD] = true
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || keep[fd] {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
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
		return nil, fmt.Errorf("control: fd %d is not open (start the VMM with vmmproc.Launch)", fdControl)
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
