package vmm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/tailbuf"
)

// Process is a running `sandfs vmm` process, as the daemon sees it. Its
// methods may be called from several goroutines; requests are serialised
// on one control connection.
type Process struct {
	cmd *exec.Cmd
	cfg Config
	cg  *cgroup.Group // removed after exit; nil: no cgroup

	mu   sync.Mutex // serialises control requests; guards conn, rd
	conn net.Conn
	rd   *bufio.Reader

	done    chan struct{} // closed once the process has been reaped
	reason  ExitReason    // valid after done
	err     error         // valid after done
	stderr  *tailbuf.Buffer
	logFile *os.File // the VMM's stderr log, closed after the process is reaped
}

// DefaultStopTimeout bounds Stop when the context has no deadline.
const DefaultStopTimeout = 5 * time.Second

// Launch starts a VMM process for cfg and returns once its machine is
// running (or paused, for a restore with StartPaused). cfg.Socket is
// required: the control socket path (at most 107 bytes). Launch never
// leaves a process behind on error; the process also dies with its parent
// (PR_SET_PDEATHSIG) and runs in its own process group.
func Launch(ctx context.Context, cfg Config) (p *Process, err error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if cfg.Socket == "" {
		return nil, fmt.Errorf("launch: no control socket path")
	}
	if len(cfg.Socket) > 107 {
		return nil, fmt.Errorf("launch: socket path %q longer than 107 bytes", cfg.Socket)
	}
	if cfg.Jail.Root != "" && !cfg.Jail.Namespaces {
		return nil, fmt.Errorf("launch: a jail root needs namespaces")
	}
	bin := cfg.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()

	// Control socket: we create and bind it, the child inherits the listener.
	os.Remove(cfg.Socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	closers = append(closers, lnFile)
	extra := []*os.File{lnFile, nil, nil}
	if cfg.Console != "" {
		f, err := openLog(cfg.Console)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		closers = append(closers, f)
		extra[1] = f
	}
	if cfg.TapFD != nil {
		extra[2] = cfg.TapFD
		if cfg.Net == nil {
			cfg.Net = &NetConfig{}
		}
		cfg.Net.TapFD = fdTap
	}
	cfgPath := cfg.Socket + ".json"
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if err := writeConfig(cfgPath, b); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}

	cmd := exec.Command(bin, "vmm", "-config", cfgPath)
	if extra[1] != nil {
		cmd.Args = append(cmd.Args, "-console") // fd 4 is announced, never guessed
	}
	cmd.Stdin = nil
	cmd.Stdout = nil
	cmd.Env = cfg.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // not nil: nil would pass on the daemon's
	}
	if cfg.Jail.Root != "" {
		cmd.Dir = "/"
	}
	p = &Process{cmd: cmd, cfg: cfg, done: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 4096}}
	var logw io.Writer = p.stderr
	if cfg.LogFile != "" {
		lf, err := openLog(cfg.LogFile)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		p.logFile = lf // closed by reap: the copy from the VMM's stderr must outlive Launch
		// Capped here, not in the VMM, so that a VMM writing without end
		// (a guest it logs for, or one that took it over) cannot fill
		// the disk (logging.go).
		logw = io.MultiWriter(p.stderr, capFile(lf, LogMax, "\n[sandfs: vmm.log truncated]\n"))
	}
	cmd.Stderr = logw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cfg.Jail.Namespaces {
		// A network namespace of its own: no interface but a down
		// loopback, no route to the host or its loopback services, and
		// no abstract unix sockets but its own (the tap, if any, comes
		// as an fd).
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS
	}
	// The cgroup: v2 is entered at clone time (CLONE_INTO_CGROUP); v1
	// only by pid once the process exists, so the process (-gate) waits
	// at a start gate (fdGate) until it is in every hierarchy.
	var gate *os.File // write end; nil without a v1 cgroup
	if cfg.Jail.Cgroup != "" {
		g, err := setupCgroup(&cfg)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		p.cg = g
		if fd := g.FD(); fd >= 0 {
			closers = append(closers, closerFunc(g.Close))
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
		} else {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, errors.Join(fmt.Errorf("launch: %w", err), p.removeCgroup())
			}
			closers = append(closers, r, w)
			for len(extra) <= fdGate-3 {
				extra = append(extra, nil)
			}
			extra[fdGate-3] = r
			gate = w
			cmd.Args = append(cmd.Args, "-gate")
		}
	}
	for len(extra) > 0 && extra[len(extra)-1] == nil {
		extra = extra[:len(extra)-1]
	}
	cmd.ExtraFiles = extra
	// Connect now: the socket listens already (the backlog holds us until
	// the process accepts), and p.conn is set before reap can look at it.
	conn, err := net.Dial("unix", cfg.Socket)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("launch: %w", err), p.removeCgroup())
	}
	p.conn, p.rd = conn, bufio.NewReader(conn)
	if err := startOnSpawner(cmd); err != nil {
		conn.Close()
		if p.logFile != nil {
			p.logFile.Close()
		}
		return nil, errors.Join(fmt.Errorf("launch: %w", err), p.removeCgroup())
	}
	go p.reap()
	started := p // the error returns below set the result p to nil
	defer func() {
		if err != nil {
			started.kill()
			<-started.done
		}
	}()
	if gate != nil {
		if err := p.cg.Add(p.cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("launch: %w", err) // the gate closes unopened: the process exits
		}
		if _, err := gate.Write([]byte{1}); err != nil {
			return nil, fmt.Errorf("launch: start gate: %w", err)
		}
	}

	// Wait until the process serves its control socket (after boot starts).
	if _, err := p.request(ctx, "status"); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	return p, nil
}

// reap waits for the process and records why it ended.
func (p *Process) reap() {
	err := p.cmd.Wait()
	p.reason, p.err = ExitError, err
	if st := p.cmd.ProcessState; st != nil {
		ws, _ := st.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled() && ws.Signal() == syscall.SIGSYS:
			p.err = fmt.Errorf("vmm killed by SIGSYS: a syscall outside the seccomp allowlist")
		case ws.Signaled():
			p.err = fmt.Errorf("vmm killed by signal %v", ws.Signal())
		default:
			switch ws.ExitStatus() {
			case codeStopped:
				p.reason, p.err = ExitStopped, nil
			case codeReset:
				p.reason, p.err = ExitReset, nil
			case codePoweroff:
				p.reason, p.err = ExitPoweroff, nil
			case codeCrash:
				p.reason, p.err = ExitCrash, errors.New("vmm: guest crashed")
			default:
				p.err = fmt.Errorf("vmm exited with status %d: %s", ws.ExitStatus(), lastError(p.stderr.String()))
			}
		}
	}
	if p.conn != nil {
		p.conn.Close()
	}
	if err := p.removeCgroup(); err != nil {
		fmt.Fprintf(p.cmd.Stderr, "vmm client: %v\n", err) // the copy from the process has ended
	}
	if p.logFile != nil {
		p.logFile.Close()
	}
	os.Remove(p.cfg.Socket)
	os.Remove(p.cfg.Socket + ".json")
	if p.cfg.Jail.UID != 0 && p.cfg.Vsock != nil {
		// Bound as root, so the VMM could not unlink it after its drop.
		os.Remove(p.cfg.Vsock.UDS)
	}
	close(p.done)
}

func (p *Process) kill() {
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // the process group
		p.cmd.Process.Kill()
	}
}

// request sends one control line and returns the reply's text after "ok",
// or the *msg.Error of an "err <ERRNO> <text>" reply (errors.Is(err,
// syscall.EBUSY) works on it; its text is the VMM's `verb: reason`).
func (p *Process) request(ctx context.Context, line string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return "", p.ended()
	default:
	}
	if p.conn == nil {
		return "", fmt.Errorf("%s: no control connection", line)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Minute)
	}
	p.conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { p.conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(p.conn, line+"\n"); err != nil {
		return "", p.connErr(line, err)
	}
	r, err := p.rd.ReadString('\n')
	if err != nil {
		return "", p.connErr(line, err)
	}
	r = strings.TrimSuffix(r, "\n")
	if rest, ok := strings.CutPrefix(r, "ok"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", msg.ParseLine(strings.TrimPrefix(r, "err ")) // errno and text
}

func (p *Process) connErr(line string, err error) error {
	select {
	case <-p.done:
		return p.ended()
	case <-time.After(100 * time.Millisecond):
	}
	return fmt.Errorf("%s: %w", strings.Fields(line)[0], err)
}

func (p *Process) ended() error {
	if p.err != nil {
		return fmt.Errorf("%w: %v", ErrEnded, p.err)
	}
	return fmt.Errorf("%w (%s)", ErrEnded, p.reason)
}

// Pid is the VMM process id (in the daemon's PID namespace).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Pause parks the vCPUs.
func (p *Process) Pause(ctx context.Context) error {
	_, err := p.request(ctx, "pause")
	return err
}

// Resume runs the vCPUs again.
func (p *Process) Resume(ctx context.Context) error {
	_, err := p.request(ctx, "resume")
	return err
}

// Save writes a paused machine's snapshot into dir. A VMM that drops
// privileges creates dir itself, as its uid (so in Jail.Work when jailed:
// it can write nowhere else); root never creates or chowns a path there,
// where the VMM could have planted a symlink. Otherwise dir is created
// here.
func (p *Process) Save(ctx context.Context, dir string) error {
	if strings.ContainsAny(dir, " \n") {
		return fmt.Errorf("save: directory %q has blanks", dir)
	}
	dir, _ = filepath.Abs(dir)
	if p.cfg.Jail.UID == 0 {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("save: %w", err)
		}
	}
	_, err := p.request(ctx, "save "+msg.Quote(dir))
	return err
}

// Status returns the status reply, e.g. "running cpus=2 mem=268435456 pid=1".
func (p *Process) Status(ctx context.Context) (string, error) {
	return p.request(ctx, "status")
}

// Request sends a raw control line (for tests and tools).
func (p *Process) Request(ctx context.Context, line string) (string, error) {
	return p.request(ctx, line)
}

// Stop asks the VMM to stop and waits for the process; if it does not end
// by ctx's deadline (DefaultStopTimeout without one), it is killed. Stop
// after the end is a no-op.
func (p *Process) Stop(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStopTimeout)
		defer cancel()
	}
	_, err := p.request(ctx, "stop")
	if err == nil {
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
		}
	}
	p.kill()
	<-p.done
	return nil
}

// Kill ends the process at once (SIGKILL to its process group).
func (p *Process) Kill() {
	p.kill()
	<-p.done
}

// Done is closed when the process has ended and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the process has ended and returns why.
func (p *Process) Wait() (ExitReason, error) {
	<-p.done
	return p.reason, p.err
}

// Err is nil while running and after a clean end (stop, guest reset or
// poweroff); otherwise the failure (a crash, a VMM error, a signal such
// as a seccomp kill).
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Reason is why the process ended (ExitRunning before).
func (p *Process) Reason() ExitReason {
	select {
	case <-p.done:
		return p.reason
	default:
		return ExitRunning
	}
}

// lastError is the last "vmm: " line of stderr that is not the
// exit-reason line.
func lastError(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "vmm: ") && !strings.HasPrefix(lines[i], "vmm: exit reason=") {
			return strings.TrimPrefix(lines[i], "vmm: ")
		}
	}
	if len(lines) > 0 {
		return lines[len(lines)-1]
	}
	return ""
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
