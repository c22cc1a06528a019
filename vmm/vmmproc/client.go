package vmmproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/snapshot"
	"sandfs/vmm"
	"sandfs/vmm/cgroup"
	"sandfs/vmm/tailbuf"
	"sandfs/vmm/virtio"
)

// Process is a running `sandfs vmm` process, as the daemon sees it. Its
// methods may be called from several goroutines; requests are serialised
// on one 9P session with the process's control tree (session.go).
type Process struct {
	cmd *exec.Cmd // nil for an adopted process (adopt.go)
	pid int
	// pidfd is an adopted process's (not our child: no wait(2)); its
	// end is seen there, and signals go through it.
	pidfd     *os.File
	stopAsked atomic.Bool // Stop was called: an adopted process's end is a stop
	cfg       Config
	cg        *cgroup.Group // removed after exit; nil: no cgroup

	mu   sync.Mutex // serialises control requests; guards sess's handles
	sess *session

	exited  chan struct{}  // closed once the process has exited (reason and err set)
	done    chan struct{}  // closed once it has been reaped (after exited, and the clean-up)
	reason  vmm.ExitReason // valid after exited
	err     error          // valid after exited
	stderr  *tailbuf.Buffer
	logFile *os.File // the VMM's stderr log, closed after the process is reaped
	// log is where the process's stderr goes (its tail, and logFile);
	// nil for an adopted process.
	log io.Writer
	// logPipe is the read end of a Detached process's stderr (its
	// named pipe, logpipe.go), copied to log until logCopied is closed;
	// both nil otherwise.
	logPipe   *os.File
	logCopied <-chan struct{}
	// launched is where Launch's time went (LaunchPhases); nil for an
	// adopted process.
	launched snapshot.Timing
}

// LaunchPhases says where Launch's time went: making the process's files
// and cgroup (prepare), starting it (spawn: clone into its namespaces
// and exec), the start gate, and its start until it answered on its
// control socket (answer: the VMM logs its own phases of that,
// "vmm: started"). "" for an adopted process.
func (p *Process) LaunchPhases() string { return p.launched.String() }

// DefaultStopTimeout bounds Stop when the context has no deadline.
const DefaultStopTimeout = 5 * time.Second

// check refuses control requests once the process has ended.
func (p *Process) check() error {
	select {
	case <-p.exited:
		return p.ended()
	default:
		return nil
	}
}

// endGrace bounds how long a failed control request waits for the
// process's end to be known: a lost connection is nearly always the VMM
// ending (its guest reset, say), and its reaper knows why only after
// the wait and the last of its log (up to logDrain). Until 2026-12-04 it
// was 100 ms, and a restored guest that reset during a loaded launch
// failed its `new` with "connection lost during open status" instead of
// its reset, which the reaper learnt 180 ms after it.
const endGrace = logDrain + time.Second

// do runs f on the control session. A failure that is not the VMM's
// refusal (a *msg.Error other than EIO) is, if the process exits within
// endGrace, its end (ErrEnded and why).
func (p *Process) do(f func(*session) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(); err != nil {
		return err
	}
	err := f(p.sess)
	if err == nil || (msg.Errno(err) != syscall.EIO && errors.As(err, new(*msg.Error))) {
		return err
	}
	select {
	case <-p.exited:
		return p.ended()
	case <-time.After(endGrace):
		return err
	}
}

// request writes one ctl message and returns nil or the VMM's refusal, a
// *msg.Error with its errno and text (errors.Is(err, syscall.EBUSY)
// works on it; its text is the VMM's `verb: reason`). A failure of the
// connection is an EIO *msg.Error saying so (package ninep).
func (p *Process) request(ctx context.Context, m string) error {
	return p.do(func(s *session) error { return s.write(ctx, m) })
}

func (p *Process) ended() error {
	if p.err != nil {
		return fmt.Errorf("%w: %v", vmm.ErrEnded, p.err)
	}
	return fmt.Errorf("%w (%s)", vmm.ErrEnded, p.reason)
}

// Pid is the VMM process id (in the daemon's PID namespace).
func (p *Process) Pid() int { return p.pid }

// Pause parks the vCPUs.
func (p *Process) Pause(ctx context.Context) error {
	return p.request(ctx, "pause")
}

// Resume runs the vCPUs again.
func (p *Process) Resume(ctx context.Context) error {
	return p.request(ctx, "resume")
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
	return p.request(ctx, "save "+msg.Quote(dir))
}

// Snapshot writes a paused machine's snapshot at dir (vmm.Machine.Snapshot):
// full if parent is "", else a delta over parent, which must lie beside
// dir and be the machine's last snapshot or the one it was restored from,
// or an ancestor of that one (the snapshots between are folded in).
// dir must not exist; the VMM creates its directory (the store) as its own
// uid, so a jailed VMM's store lies in Jail.Work (root creates nothing
// there). Whether it was written full is in snapshot.Open(dir).
func (p *Process) Snapshot(ctx context.Context, dir, parent string) error {
	return p.snapshotVerb(ctx, "snapshot", dir, parent)
}

// SaveToDisk is a pause to disk's writes in one request: Snapshot of the
// paused machine, which is to end (its dirty-page tracking is not
// re-armed), then SyncDisks. The process may then be killed (Abort).
func (p *Process) SaveToDisk(ctx context.Context, dir, parent string) error {
	return p.snapshotVerb(ctx, "savetodisk", dir, parent)
}

// snapshotVerb sends verb <dir> [<parent>].
func (p *Process) snapshotVerb(ctx context.Context, verb, dir, parent string) error {
	m := verb + " "
	for i, d := range []string{dir, parent} {
		if d == "" {
			continue
		}
		if strings.ContainsAny(d, "\n") {
			return msg.Errorf(syscall.EINVAL, "%s: directory %s has a newline", verb, msg.Cite(d))
		}
		d, _ = filepath.Abs(d)
		if i > 0 {
			m += " "
		}
		m += msg.Quote(d)
	}
	return p.request(ctx, m)
}

// CloneDisk copies disk n's copy-on-write layer of a paused machine to dst
// and dst+".map" (blk.COW.Clone: a reflink where the file system has one,
// else the chunks written), for a snapshot's frozen disk; the machine
// keeps its own layer. The VMM creates dst's directory as its own uid
// (in Jail.Work when jailed).
func (p *Process) CloneDisk(ctx context.Context, n int, dst string) error {
	if strings.ContainsAny(dst, "\n") {
		return msg.Errorf(syscall.EINVAL, "clonedisk: path %s has a newline", msg.Cite(dst))
	}
	dst, _ = filepath.Abs(dst)
	return p.request(ctx, fmt.Sprintf("clonedisk %d %s", n, msg.Quote(dst)))
}

// SyncDisks makes a paused machine's copy-on-write disk layers durable as
// they are (their overlays fsynced, their maps written): with a snapshot
// taken in the same pause, the process may then be killed (Kill) instead
// of stopped, and a restore of that snapshot over those layers goes on
// where it paused (a pause to disk).
func (p *Process) SyncDisks(ctx context.Context) error {
	return p.request(ctx, "syncdisks")
}

// Status reads the status file, e.g. "running cpus=2 mem=268435456 pid=1
// tracking=soft-dirty" (statusFile).
func (p *Process) Status(ctx context.Context) (string, error) {
	var st string
	err := p.do(func(s *session) (err error) {
		st, err = s.readStatus(ctx)
		return err
	})
	return st, err
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
	// Whether or not the reply comes back (the VMM may be gone first),
	// the process ends by itself or at the deadline.
	p.stopAsked.Store(true)
	p.request(ctx, "stop")
	p.sess.close() // the VMM, stopped, exits once its clients have hung up
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
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

// Abort is Kill without the wait: it sends SIGKILL and returns; Done is
// closed once the process has been reaped and what it left removed
// (the kernel frees its memory meanwhile: in the lab, 60-220 ms of a
// 128 MiB guest's pause to disk went to waiting for that).
func (p *Process) Abort() { p.kill() }

// Config is the process's Config (for an adopted process, what Launch
// wrote to <socket>.json, and Socket).
func (p *Process) Config() Config { return p.cfg }

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

// AskDump has a VMM launched with virtio.DebugEnv write its SIGUSR1 dump
// (devices and interrupt state) to its log, and gives it a second to do
// so, for a machine about to be given up (a restored guest whose agent
// never answered): the dump is gone with the process. Without DebugEnv
// it does nothing (the VMM has no handler for the signal).
func (p *Process) AskDump() {
	if os.Getenv(virtio.DebugEnv) == "" {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	if p.pidfd != nil {
		p.signalPidfd(unix.SIGUSR1)
	} else if err := syscall.Kill(p.pid, syscall.SIGUSR1); err != nil {
		return
	}
	time.Sleep(time.Second)
}
