package vmmproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/snapshot"
	"sandfs/vmm/cgroup"
)

// Spare VMM processes. Of a restore's launch in the lab, a third to a
// half is the VMM's exec and the Go runtime's start before its main
// (docs/snapshots.md, "Where a new's time goes"), work that depends on
// nothing of the sandbox. So a launcher may keep processes started
// ahead, each in new namespaces of its own, waiting on a socket:
//
//	sandfs-vmm vmm -spare      fd 3: one end of a SOCK_SEQPACKET pair
//
// Launch through Spares takes one, makes the sandbox's files and cgroup
// as it would for a new process, and sends the spare one message: the
// arguments it would have been started with (-config FILE, -console,
// -gate) and, as SCM_RIGHTS, the descriptors it would have inherited
// (control socket, console, tap, start gate) with the numbers each is to
// have, and its stderr. The spare puts them in place and goes on as
// that process would have (Main). Launch then gives it the sandbox's
// cgroup limits, records its identity and opens its start gate, so that
// nothing of the machine is allocated outside its limits.
//
// Cgroups: with cgroup v2, each spare starts (CLONE_INTO_CGROUP) in a
// group of its own under the sandboxes' parent, `<parent>/vmm-<random>`,
// and the sandbox it becomes takes that group over: Launch names it in
// the sandbox's config (Jail.Cgroup, which adoption and removal read) and
// writes the sandbox's limits into it. Moving a running process between
// v2 groups waits for an RCU grace period (8-68 ms of a `new` in the
// lab), and the memory it charged before would stay with the old group.
// With v1 (no CLONE_INTO_CGROUP) a spare starts in the launcher's groups
// and Launch moves it into the sandbox's, whose limits apply from then.
//
// Only Detached processes are kept spare (the daemon's sandboxes'): a
// Detached launch always has a start gate, and its stderr is a named
// pipe (logpipe.go), a file to pass. A spare runs as root in its
// namespaces, as a new VMM does until it confines itself; it has no
// parent-death signal (Detached) and ends when its socket's other end
// closes unsent (the launcher gone, or Close). One is replaced in the
// background as it is taken.
type Spares struct {
	binary     string // as Config.Binary gives it ("": this executable): what a launch must ask for
	bin        string // the file run
	namespaces bool
	groups     spareGroups // each spare's cgroup (v2, under the sandboxes' parent)
	n          int

	mu     sync.Mutex
	ready  []*spare // started, waiting for their message; protected by mu
	making int      // being started; protected by mu
	closed bool     // protected by mu
}

// spare is one process waiting for its message on conn.
type spare struct {
	cmd  *exec.Cmd
	conn *os.File      // the launcher's end of the pair
	cg   *cgroup.Group // the v2 group it started in, until a launch takes it over; nil: none
}

// handoff is the message to a spare: its arguments and, for each
// descriptor passed with it in order, the number it is to have.
type handoff struct {
	Args []string
	FDs  []int
}

// spareArg is the argument a spare is started with (after "vmm"), and
// titleRoom the one after it: room in its command line for the
// arguments it is handed (retitle), so that ps and /proc/<pid>/cmdline
// show a launched spare as they show any VMM: with its config's path.
const spareArg = "-spare"

var titleRoom = strings.Repeat(" ", 4096)

// maxHandoff bounds the message a spare reads (its arguments are a
// config path and flags).
const maxHandoff = 64 << 10

// NewSpares keeps n processes of binary bin (as Config.Binary; "" this
// executable) spare for Detached launches, in new namespaces when
// namespaces is set (as JailConfig.Namespaces), each in a cgroup of its
// own under cgParent where the host has cgroup v2 (cgParent "": none;
// a launch whose Jail.Cgroup is not under cgParent gets a new process,
// not a spare with a spare's limits). They are started in the background; the
// empty groups spares of an earlier launcher left are removed first.
func NewSpares(binary string, namespaces bool, cgParent string, n int) (*Spares, error) {
	bin := binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	s := &Spares{binary: binary, bin: bin, namespaces: namespaces, groups: newSpareGroups(cgParent), n: n}
	s.groups.removeStale()
	s.refill()
	return s, nil
}

// Launch is Launch(ctx, cfg) from a spare process when cfg can use one
// (Detached, the spares' binary and namespaces, the default environment)
// and one is ready; otherwise, and when the spare turns out dead, from a
// new process.
func (s *Spares) Launch(ctx context.Context, cfg Config) (*Process, error) {
	if s == nil || !s.fits(cfg) {
		return Launch(ctx, cfg)
	}
	defer s.refill()
	return launch(ctx, cfg, s.take())
}

// fits reports whether cfg's process may be a spare.
func (s *Spares) fits(cfg Config) bool {
	return cfg.Detached && cfg.Env == nil && cfg.Binary == s.binary && cfg.Jail.Namespaces == s.namespaces
}

// take returns a ready spare, or nil.
func (s *Spares) take() *spare {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ready) == 0 {
		return nil
	}
	sp := s.ready[0]
	s.ready = s.ready[1:]
	return sp
}

// refill starts, in the background, the spares missing from n.
func (s *Spares) refill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; !s.closed && len(s.ready)+s.making < s.n; s.making++ {
		go func() {
			sp, err := s.start()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.making--
			if err != nil {
				return // Launch starts new processes meanwhile
			}
			if s.closed {
				sp.end()
				return
			}
			s.ready = append(s.ready, sp)
		}()
	}
}

// start starts one spare.
func (s *Spares) start() (*spare, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spare vmm: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spare"), os.NewFile(uintptr(fds[1]), "spare")
	defer theirs.Close()
	cmd := command(&Config{Detached: true, Jail: JailConfig{Namespaces: s.namespaces}}, s.bin, []string{"vmm", spareArg, titleRoom})
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	g, err := s.groups.make()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("spare vmm: %w", err)
	}
	if g != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, g.FD()
	}
	err = startOnSpawner(cmd)
	if g != nil {
		g.Close() // its fd was for the clone
	}
	if err != nil {
		ours.Close()
		if g != nil {
			g.Remove()
		}
		return nil, fmt.Errorf("spare vmm: %w", err)
	}
	// Its start (exec, the Go runtime's) waits for idle CPU: it is
	// made as a sandbox was just launched, whose guest is starting. The
	// threads it makes inherit the nice; take gives them the daemon's.
	unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, spareNice)
	return &spare{cmd: cmd, conn: ours, cg: g}, nil
}

// spareNice is a waiting spare's nice value.
const spareNice = 19

// unnice gives every thread of the spare the launcher's priority (a
// thread's nice is its own on Linux).
func (sp *spare) unnice() error {
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return err
	}
	// getpriority(2)'s raw value is 20 - nice.
	nice := 20 - prio
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", sp.cmd.Process.Pid))
	if err != nil {
		return err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}

// end ends a spare that will not be used: closing its socket ends it;
// the kill is for one that is not reading it. Its group goes with it.
func (sp *spare) end() {
	sp.conn.Close()
	syscall.Kill(-sp.cmd.Process.Pid, syscall.SIGKILL)
	sp.cmd.Wait()
	if sp.cg != nil {
		sp.cg.Remove()
		sp.cg = nil
	}
}

// Close ends the spares and makes no more.
func (s *Spares) Close() {
	s.mu.Lock()
	s.closed = true
	ready := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, sp := range ready {
		sp.end()
	}
}

// send gives the spare its arguments and descriptors: files[i] is to be
// its descriptor fds[i]. After it, the spare is the process (its socket
// is closed here).
func (sp *spare) send(args []string, files []*os.File, fds []int) error {
	defer sp.conn.Close()
	b, err := json.Marshal(handoff{Args: args, FDs: fds})
	if err != nil {
		return err
	}
	raw := make([]int, len(files))
	for i, f := range files {
		raw[i] = int(f.Fd())
	}
	if err := unix.Sendmsg(int(sp.conn.Fd()), b, unix.UnixRights(raw...), nil, 0); err != nil {
		return fmt.Errorf("spare vmm: hand over: %w", err)
	}
	return nil
}

// startSpare makes s the process of p, in place of starting p.cmd: s
// gets p.cmd's arguments, sp's descriptors (as ExtraFiles would have
// given them) and stderr (the named pipe's write end: Detached). handed
// says whether s took them; if not, p.cmd can still be started.
// Its steps are marked in tm (from *t).
func (p *Process) startSpare(sp *spawn, s *spare, tm *snapshot.Timing, t *snapshot.Stamp) (handed bool, err error) {
	stderr, ok := p.cmd.Stderr.(*os.File)
	if !ok || sp.gate == nil {
		return false, errors.New("spare vmm: not a Detached launch")
	}
	if err := s.unnice(); err != nil {
		return false, fmt.Errorf("spare vmm: renice: %w", err)
	}
	files, fds := []*os.File{stderr}, []int{2}
	for i, f := range sp.extra {
		if f != nil {
			files, fds = append(files, f), append(fds, 3+i)
		}
	}
	if err := s.send(p.cmd.Args[2:], files, fds); err != nil {
		return false, err
	}
	tm.Mark("handoff", t)
	p.cmd = s.cmd
	p.pid = s.cmd.Process.Pid
	p.sess = newSession(p.cfg.Socket, p.check)
	fail := func(err error) (bool, error) {
		p.kill() // waiting at the gate
		p.reap()
		return true, err
	}
	switch {
	case s.cg != nil && p.cg == nil && p.cfg.Jail.Cgroup == s.cg.Name:
		// Its own group becomes the sandbox's (launch named it so).
		p.cg, s.cg = s.cg, nil
		if err := p.cg.SetLimits(cgroupLimits(&p.cfg)); err != nil {
			return fail(fmt.Errorf("spare vmm: %w", err))
		}
		tm.Mark("limits", t)
	case p.cg != nil:
		if err := p.cg.Add(p.pid); err != nil {
			return fail(fmt.Errorf("spare vmm: %w", err))
		}
		tm.Mark("cgroup", t)
	}
	if err := writeIdentity(p.cfg.Socket, p.pid); err != nil {
		return fail(err)
	}
	tm.Mark("identity", t)
	go p.reap()
	return true, nil
}
