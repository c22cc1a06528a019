package vmmproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"sandfs/ctl/msg"
	"sandfs/vmm"
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

	done    chan struct{}  // closed once the process has been reaped
	reason  vmm.ExitReason // valid after done
	err     error          // valid after done
	stderr  *tailbuf.Buffer
	logFile *os.File // the VMM's stderr log, closed after the process is reaped
}

// DefaultStopTimeout bounds Stop when the context has no deadline.
const DefaultStopTimeout = 5 * time.Second

// setConn sets the control connection (before the process starts).
func (p *Process) setConn(c net.Conn) { p.conn, p.rd = c, bufio.NewReader(c) }

// closeConn closes the control connection (once the process has ended).
func (p *Process) closeConn() {
	if p.conn != nil {
		p.conn.Close()
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
		return fmt.Errorf("%w: %v", vmm.ErrEnded, p.err)
	}
	return fmt.Errorf("%w (%s)", vmm.ErrEnded, p.reason)
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
func (p *Process) Wait() (vmm.ExitReason, error) {
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
func (p *Process) Reason() vmm.ExitReason {
	select {
	case <-p.done:
		return p.reason
	default:
		return vmm.ExitRunning
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
