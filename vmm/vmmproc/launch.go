package vmmproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sync"
	"syscall"

	"sandfs/snapshot"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/tailbuf"
	"sandfs/vmm/uds"
	"sandfs/vmm/virtio"
)

// Launch starts a VMM process for cfg and returns once its machine is
// running (or paused, for a restore with StartPaused). cfg.Socket is
// required: the control socket path (of any length: package uds). Launch never
// leaves a process behind on error. The process runs in its own process
// group and dies with its parent (PR_SET_PDEATHSIG); a Detached one runs
// in its own session instead, outlives its parent, and is found again by
// Adopt (adopt.go): Launch records its identity beside the socket before
// it lets it run (start gate).
func Launch(ctx context.Context, cfg Config) (*Process, error) {
	return launch(ctx, cfg, nil)
}

// launch is Launch, with spare (if not nil: Spares) as the process
// instead of a new one, unless it turns out dead.
func launch(ctx context.Context, cfg Config, spare *spare) (p *Process, err error) {
	bin, err := cfg.launchable()
	if err != nil {
		if spare != nil {
			spare.end()
		}
		return nil, fmt.Errorf("launch: %w", err)
	}
	sp := &spawn{}
	defer sp.close()
	var tm snapshot.Timing
	t := snapshot.Now()
	// A spare started in a cgroup of its own beside where the sandbox's
	// would be: that group becomes the sandbox's (Spares).
	// One in a group elsewhere (or a launch with none) would keep a
	// spare's limits: a new process instead.
	spareGroup := spare != nil && spare.cg != nil && cfg.Jail.Cgroup != "" &&
		path.Dir(cfg.Jail.Cgroup) == path.Dir(spare.cg.Name)
	if spareGroup {
		cfg.Jail.Cgroup = spare.cg.Name
	} else if spare != nil && spare.cg != nil {
		spare.end()
		spare = nil
	}
	p, err = prepare(&cfg, bin, sp, !spareGroup)
	if sp.gate != nil {
		defer sp.gate.Close()
	}
	if err != nil {
		if spare != nil {
			spare.end() // not handed over: it would wait for nothing
		}
		return nil, fmt.Errorf("launch: %w", err)
	}
	tm.Mark("prepare", &t)
	if spare != nil {
		handed, err := p.startSpare(sp, spare, &tm, &t)
		if handed && err != nil {
			return nil, errors.Join(fmt.Errorf("launch: %w", err), p.removeCgroup())
		}
		if !handed {
			spare.end() // dead, or not reading: a new process instead, in a group of the same name
			spare = nil
			if spareGroup {
				if err := p.joinCgroup(sp); err != nil {
					return nil, fmt.Errorf("launch: %w", err)
				}
			}
		}
	}
	if spare == nil {
		if err := p.start(sp); err != nil {
			return nil, errors.Join(fmt.Errorf("launch: %w", err), p.removeCgroup())
		}
		tm.Mark("spawn", &t)
	}
	// The child has its files: without our copy of the listener, a
	// connection waiting in its backlog fails as soon as the child dies.
	sp.close()
	started := p // the error returns below set the result p to nil
	defer func() {
		if err != nil {
			started.kill()
			<-started.done
		}
	}()
	if sp.gate != nil {
		if p.cg != nil && p.cg.Mode == cgroup.V1 {
			if err := p.cg.Add(p.pid); err != nil {
				return nil, fmt.Errorf("launch: %w", err) // the gate closes unopened: the process exits
			}
		}
		if _, err := sp.gate.Write([]byte{1}); err != nil {
			return nil, fmt.Errorf("launch: start gate: %w", err)
		}
		tm.Mark("gate", &t)
	}
	// Wait until the process serves its control socket (after boot starts).
	if _, err := p.Status(ctx); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	tm.Mark("answer", &t)
	p.launched = tm
	return p, nil
}

// launchable checks what Launch needs beyond validate and returns the
// binary to run.
func (c *Config) launchable() (string, error) {
	if err := c.validate(); err != nil {
		return "", err
	}
	if c.Socket == "" {
		return "", fmt.Errorf("no control socket path")
	}
	if c.Jail.Root != "" && !c.Jail.Namespaces {
		return "", fmt.Errorf("a jail root needs namespaces")
	}
	if c.Binary != "" {
		return c.Binary, nil
	}
	return os.Executable()
}

// spawn is what Launch hands the child, and closes in the parent once the
// child has them (or on failure).
type spawn struct {
	extra   []*os.File // the child's fds 3, 4, ...
	closers []io.Closer
	gate    *os.File // write end of the start gate; nil unless a v1 cgroup or Detached
}

// inherit makes f the child's fd.
func (s *spawn) inherit(fd int, f *os.File) {
	for len(s.extra) <= fd-3 {
		s.extra = append(s.extra, nil)
	}
	s.extra[fd-3] = f
}

// close closes the parent's copies (a second time is a no-op), the
// start gate's write end excepted (Launch closes it once written).
func (s *spawn) close() {
	for _, c := range s.closers {
		c.Close()
	}
	s.closers = nil
}

// prepare makes the process's files (control socket, console, config,
// log) and command, and its cgroup unless not withCgroup (a spare's
// group, which the launch takes over); nothing runs yet.
func prepare(cfg *Config, bin string, sp *spawn, withCgroup bool) (*Process, error) {
	ln, err := listenControl(cfg.Socket)
	if err != nil {
		return nil, err
	}
	sp.closers = append(sp.closers, ln)
	sp.inherit(fdControl, ln)
	args := []string{"vmm", "-config", cfg.Socket + ".json"}
	if cfg.Console != "" {
		f, err := openLog(cfg.Console)
		if err != nil {
			return nil, err
		}
		sp.closers = append(sp.closers, f)
		sp.inherit(fdConsole, f)
		args = append(args, "-console") // fd 4 is announced, never guessed
	}
	if cfg.TapFD != nil {
		sp.inherit(fdTap, cfg.TapFD)
		if cfg.Net == nil {
			cfg.Net = &NetConfig{}
		}
		cfg.Net.TapFD = fdTap
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeConfig(cfg.Socket+".json", b); err != nil {
		return nil, err
	}
	p := &Process{cmd: command(cfg, bin, args), cfg: *cfg, done: make(chan struct{}), exited: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 4096}}
	if err := p.logTo(cfg.LogFile, sp); err != nil {
		return nil, err
	}
	if withCgroup {
		err = p.joinCgroup(sp)
	}
	if err == nil && cfg.Detached && sp.gate == nil {
		err = p.addGate(sp)
	}
	if err != nil {
		if p.logFile != nil {
			p.logFile.Close()
		}
		return nil, errors.Join(err, p.removeCgroup())
	}
	return p, nil
}

// listenControl creates and binds the control socket (a path of any
// length: package uds); the child inherits the listener, and the socket
// file stays for it.
func listenControl(path string) (*os.File, error) {
	ln, err := uds.Listen(path)
	if err != nil {
		return nil, err
	}
	f, err := ln.File()
	ln.UnixListener.Close()
	return f, err
}

// command is the VMM's command: its environment is cfg.Env, else empty
// but for the launcher's virtio.DebugEnv (so that `SANDFS_VIRTIO_DEBUG=1
// sandfs serve` reaches every VMM); its own process group, killed with
// its parent (Detached: its own session, left running), in new
// namespaces.
func command(cfg *Config, bin string, args []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = cfg.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // not nil: nil would pass on the daemon's
		if v := os.Getenv(virtio.DebugEnv); v != "" {
			cmd.Env = append(cmd.Env, virtio.DebugEnv+"="+v)
		}
	}
	if cfg.Jail.Root != "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cfg.Detached {
		// No terminal's or group's signal of the daemon reaches it;
		// it is still its process group's leader (Process.kill).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if cfg.Jail.Namespaces {
		// A network namespace of its own: no interface but a down
		// loopback, no route to the host or its loopback services, and
		// no abstract unix sockets but its own (the tap, if any, comes
		// as an fd).
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS
	}
	return cmd
}

// logTo sends the process's stderr to its tail buffer and, if path is
// set, to that log file; a Detached process's through its named pipe
// (logpipe.go).
func (p *Process) logTo(path string, sp *spawn) error {
	var w io.Writer = p.stderr
	if path != "" {
		lf, err := openLog(path)
		if err != nil {
			return err
		}
		p.logFile = lf // closed by reap: the copy from the VMM's stderr must outlive Launch
		// Capped here, not in the VMM, so that a VMM writing without end
		// (a guest it logs for, or one that took it over) cannot fill
		// the disk (logging.go).
		w = io.MultiWriter(p.stderr, capFile(lf, LogMax, "\n[sandfs: vmm.log truncated]\n"))
	}
	p.log = w
	if p.cfg.Detached {
		return p.logThroughFIFO(w, sp)
	}
	p.cmd.Stderr = w
	return nil
}

// joinCgroup creates the process's cgroup, if cfg asks for one. v2 is
// entered at clone time (CLONE_INTO_CGROUP); v1 only by pid once the
// process exists, so the process (-gate) waits at a start gate (fdGate)
// until Launch has put it in every hierarchy. (A Detached process waits
// there too, until its identity is recorded: addGate.)
func (p *Process) joinCgroup(sp *spawn) error {
	if p.cfg.Jail.Cgroup == "" {
		return nil
	}
	g, err := setupCgroup(&p.cfg)
	if err != nil {
		return err
	}
	p.cg = g
	if fd := g.FD(); fd >= 0 {
		sp.closers = append(sp.closers, closerFunc(g.Close))
		p.cmd.SysProcAttr.UseCgroupFD = true
		p.cmd.SysProcAttr.CgroupFD = fd
		return nil
	}
	return p.addGate(sp)
}

// addGate makes the start gate: the process (-gate) waits for a byte on
// fdGate before it does anything, and exits if the write end closes
// unwritten (Launch failed, or the daemon died first).
func (p *Process) addGate(sp *spawn) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	sp.closers = append(sp.closers, r)
	sp.inherit(fdGate, r)
	sp.gate = w // closed by Launch once written (or on failure)
	p.cmd.Args = append(p.cmd.Args, "-gate")
	return nil
}

// start starts the process; its control session dials the socket (which
// listens already: the backlog holds a connection until the process
// accepts) at the first request.
func (p *Process) start(sp *spawn) error {
	p.cmd.ExtraFiles = sp.extra
	p.sess = newSession(p.cfg.Socket, p.check)
	if err := startOnSpawner(p.cmd); err != nil {
		p.sess.close()
		if p.logFile != nil {
			p.logFile.Close()
		}
		return err
	}
	p.pid = p.cmd.Process.Pid
	if p.cfg.Detached {
		// Not reaped yet (reap starts below): pid is still this child.
		if err := writeIdentity(p.cfg.Socket, p.pid); err != nil {
			p.kill() // waiting at the gate
			p.reap()
			return err
		}
	}
	go p.reap()
	return nil
}

// reap waits for the process and records why it ended.
func (p *Process) reap() {
	werr := p.cmd.Wait()
	p.waitLog()
	p.reason, p.err = exitStatus(werr, p.cmd.ProcessState, p.stderr.String())
	close(p.exited)
	p.cleanup()
	close(p.done)
}

// cleanup removes what an ended process leaves: its control session,
// cgroup, log file, control socket, config and identity, and the vsock
// socket it could not unlink.
func (p *Process) cleanup() {
	p.sess.close() // requests in flight fail, and check says why
	var w io.Writer = p.stderr
	if p.log != nil {
		w = p.log // after the copy from the process has ended: its log
	}
	if err := p.removeCgroup(); err != nil {
		fmt.Fprintf(w, "vmm client: %v\n", err)
	}
	if p.logFile != nil {
		p.logFile.Close()
	}
	os.Remove(p.cfg.Socket)
	os.Remove(p.cfg.Socket + ".json")
	os.Remove(p.cfg.Socket + identitySuffix)
	os.Remove(p.cfg.Socket + logFIFOSuffix)
	if p.cfg.Jail.UID != 0 && p.cfg.Vsock != nil && p.cfg.Vsock.UDS != "" {
		// Bound as root, so the VMM could not unlink it after its drop.
		os.Remove(p.cfg.Vsock.UDS)
	}
}

// exitStatus maps the process's end back to why its machine ended (the
// exit codes of Main).
func exitStatus(err error, st *os.ProcessState, stderr string) (vmm.ExitReason, error) {
	if st == nil {
		return vmm.ExitError, err
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGSYS:
		return vmm.ExitError, fmt.Errorf("vmm killed by SIGSYS: a syscall outside the seccomp allowlist")
	case ws.Signaled():
		return vmm.ExitError, fmt.Errorf("vmm killed by signal %v", ws.Signal())
	}
	switch ws.ExitStatus() {
	case codeStopped:
		return vmm.ExitStopped, nil
	case codeReset:
		return vmm.ExitReset, nil
	case codePoweroff:
		return vmm.ExitPoweroff, nil
	case codeCrash:
		return vmm.ExitCrash, errors.New("vmm: guest crashed")
	}
	return vmm.ExitError, fmt.Errorf("vmm exited with status %d: %s", ws.ExitStatus(), lastError(stderr))
}

func (p *Process) kill() {
	if p.pidfd != nil {
		p.signalPidfd(syscall.SIGKILL) // pid 1 of its PID namespace when jailed: the rest dies with it
		return
	}
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // the process group
		p.cmd.Process.Kill()
	}
}

// openLog opens (creating) a log file the process writes to, for append:
// never through a symlink, and only a regular file (a FIFO would block).
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o640)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file", path)
	}
	return f, nil
}

// writeConfig writes the process's config to path, replacing what is
// there but never writing through a symlink.
func writeConfig(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("write %s: not a regular file", path)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// closerFunc makes a func() an io.Closer.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not
// the process (prctl(2); golang/go#27505). Go may end an OS thread whose
// goroutine exits while locked to it, so children are started from one
// goroutine locked to a thread that never exits.
var spawnReq = make(chan spawnCall)

type spawnCall struct {
	cmd  *exec.Cmd
	done chan error
}

var spawnOnce sync.Once

func startOnSpawner(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for c := range spawnReq {
				c.done <- c.cmd.Start()
			}
		}()
	})
	c := spawnCall{cmd: cmd, done: make(chan error, 1)}
	spawnReq <- c
	return <-c.done
}
