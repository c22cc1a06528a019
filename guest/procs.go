package guest

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultRetention is how long a finished process's record (status and
// unread output) is kept after it ends and its last open file is closed.
const DefaultRetention = 5 * time.Minute

// procTable holds every process record of the agent.
type procTable struct {
	etc       string        // root of /etc for user lookups ("/" in the guest)
	retention time.Duration // see DefaultRetention

	mu    sync.Mutex // guards next and procs; never held with a proc.mu
	next  int        // the next slot number (numbers are never reused)
	procs map[int]*proc
}

func newProcTable(etc string, retention time.Duration) *procTable {
	return &procTable{etc: etc, retention: retention, next: 1, procs: map[int]*proc{}}
}

// alloc makes a new slot in state new with one open handle (the clone
// handle that asked for it).
func (t *procTable) alloc() *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := newProc(t.next, t)
	p.opens = 1
	t.procs[p.n] = p
	t.next++
	return p
}

func (t *procTable) get(n int) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[n]
}

// list returns the live slot numbers in order.
func (t *procTable) list() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns := make([]int, 0, len(t.procs))
	for n := range t.procs {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// open and close count open handles on a slot's files.
func (p *proc) open() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freed {
		return false
	}
	p.opens++
	return true
}

func (p *proc) close() {
	p.mu.Lock()
	p.opens--
	p.mu.Unlock()
	p.tab.maybeFree(p)
}

// maybeFree frees p if nothing can still want it: no open handles, and
// either it never ran (state new or failed) or it ended more than the
// retention ago.
func (t *procTable) maybeFree(p *proc) {
	p.mu.Lock()
	free := !p.freed && p.opens == 0 &&
		(p.state == stNew || p.state == stFailed ||
			p.state.done() && time.Since(p.ended) >= t.retention)
	if free {
		p.freeLocked()
	}
	p.mu.Unlock()
	if free {
		t.remove(p)
	}
}

// scheduleFree arranges for maybeFree to run when the retention is over.
func (t *procTable) scheduleFree(p *proc) {
	time.AfterFunc(t.retention, func() { t.maybeFree(p) })
}

func (t *procTable) remove(p *proc) {
	t.mu.Lock()
	delete(t.procs, p.n)
	t.mu.Unlock()
}

// freeLocked marks p freed, drops its buffered output and wakes every
// blocked reader (they see EOF). Requires p.mu.
func (p *proc) freeLocked() {
	p.freed = true
	p.out.buf, p.errs.buf = nil, nil
	p.notifyLocked()
}

// ctlVerb is one verb of procs/<n>/ctl (and of a clone handle).
type ctlVerb struct {
	name     string
	min, max int // argument counts; max -1: any
	usage    string
	doc      string
	state    string // required state, "" any
	apply    func(p *proc, args []string) error
}

// ctlVerbs is the grammar of procs/<n>/ctl, one message per write. The
// verbs before start only set configuration (state new, EBUSY otherwise).
var ctlVerbs = []ctlVerb{
	{"user", 1, 1, "user NAME|UID[:GID]", "run as this user (default root): uid, gid, supplementary groups from /etc/group, HOME/USER/LOGNAME/SHELL from /etc/passwd; a numeric UID[:GID] needs no passwd entry. Checked at start (ENOENT no such user).", "new",
		func(p *proc, a []string) error { p.spec.user = a[0]; return nil }},
	{"cwd", 1, 1, "cwd DIR", "working directory (default: the user's home, or / if it has none); ~ and relative paths are against home. Checked at start (ENOENT, ENOTDIR).", "new",
		func(p *proc, a []string) error { p.spec.cwd = a[0]; return nil }},
	{"env", 1, -1, "env K=V...", "add environment variables (after PATH, HOME, USER, LOGNAME, SHELL, TERM with a pty; a later K replaces an earlier one).", "new",
		func(p *proc, a []string) error {
			for _, kv := range a {
				k, _, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return errorf(syscall.EINVAL, "env: want K=V, got %s", quote(kv))
				}
			}
			p.spec.env = append(p.spec.env, a...)
			return nil
		}},
	{"pty", 1, 1, "pty on|off", "run on a new pseudo-terminal (controlling tty, new session): stdin and stdout are the terminal, stderr is empty.", "new",
		func(p *proc, a []string) error {
			switch a[0] {
			case "on":
				p.spec.pty = true
			case "off":
				p.spec.pty = false
			default:
				return errorf(syscall.EINVAL, "pty: want on or off, got %s", quote(a[0]))
			}
			return nil
		}},
	{"tag", 1, 1, "tag TEXT", "a free-form label kept with the process (E2B's tag); shown in config.", "",
		func(p *proc, a []string) error { p.spec.tag = a[0]; return nil }},
	{"stdin", 1, 1, "stdin on|off", "on (default): stdin is a pipe fed by writes to the stdin file; off: /dev/null.", "new",
		func(p *proc, a []string) error {
			switch a[0] {
			case "on":
				p.spec.noStdin = false
			case "off":
				p.spec.noStdin = true
			default:
				return errorf(syscall.EINVAL, "stdin: want on or off, got %s", quote(a[0]))
			}
			return nil
		}},
	{"size", 2, 2, "size ROWS COLS", "terminal size (default 24 80); any state: resizes a running pty (TIOCSWINSZ, SIGWINCH).", "",
		func(p *proc, a []string) error {
			r, err1 := strconv.ParseUint(a[0], 10, 16)
			c, err2 := strconv.ParseUint(a[1], 10, 16)
			if err1 != nil || err2 != nil || r == 0 || c == 0 {
				return errorf(syscall.EINVAL, "size: want ROWS COLS, got %s", quote(strings.Join(a, " ")))
			}
			p.spec.rows, p.spec.cols = uint16(r), uint16(c)
			if p.ptm != nil && p.state == stRunning {
				// Not p.ptm.Fd(): that would switch the master to
				// blocking mode under the pump's feet.
				rc, err := p.ptm.SyscallConn()
				if err == nil {
					cerr := rc.Control(func(fd uintptr) { err = setWinsize(int(fd), p.spec.rows, p.spec.cols) })
					if err == nil {
						err = cerr
					}
				}
				if err != nil {
					return errorf(errnoSys(err), "size: %v", err)
				}
			}
			return nil
		}},
	{"start", 1, -1, "start CMD [ARG...]", "start CMD (searched in PATH unless it has a /) with these arguments. Errors: ENOENT no such user, cwd or command (text in err), EACCES not executable, EBUSY already started; a failed start leaves the slot failed.", "",
		func(p *proc, a []string) error { return p.startFromCtl(a) }},
	{"exec", 1, 1, "exec 'SHELL COMMAND'", "start /bin/sh -c 'SHELL COMMAND' (same errors as start).", "",
		func(p *proc, a []string) error { return p.startFromCtl([]string{"/bin/sh", "-c", a[0]}) }},
	{"signal", 1, 2, "signal SIG [group]", "send SIG (TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH, with or without SIG, or a number) to the process, or to its process group with 'group'. EBUSY unless running.", "",
		func(p *proc, a []string) error { return p.signal(a) }},
	{"closestdin", 0, 0, "closestdin", "close stdin (the process reads EOF); with a pty, send ^D (VEOF) instead. EBUSY unless running.", "",
		func(p *proc, a []string) error { return p.closeStdinLocked() }},
	{"free", 0, 0, "free", "forget a finished (or never started) process now: its files disappear and blocked readers get EOF. EBUSY while running.", "",
		func(p *proc, a []string) error {
			if p.state == stRunning {
				return errorf(syscall.EBUSY, "free: process is running")
			}
			p.freeLocked()
			return nil
		}},
}

func lookupVerb(name string) *ctlVerb {
	for i := range ctlVerbs {
		if ctlVerbs[i].name == name {
			return &ctlVerbs[i]
		}
	}
	return nil
}

// ctl parses and applies one ctl message; a failure's text goes to the
// err file.
func (p *proc) ctl(msg []byte) error {
	err := p.ctl1(msg)
	if err != nil {
		p.mu.Lock()
		p.errText = err.Error()
		p.mu.Unlock()
	}
	return err
}

func (p *proc) ctl1(msg []byte) error {
	c, err := parseMessage(msg)
	if err != nil {
		return err
	}
	v := lookupVerb(c.verb)
	if v == nil {
		return errorf(syscall.EINVAL, "ctl: unknown verb %s", quote(c.verb))
	}
	if len(c.args) < v.min || v.max >= 0 && len(c.args) > v.max {
		return errorf(syscall.EINVAL, "%s: wrong number of arguments (usage: %s)", v.name, v.usage)
	}
	if v.name == "start" || v.name == "exec" {
		return v.apply(p, c.args) // takes p.mu itself
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freed {
		return errorf(syscall.ENOENT, "%s: process freed", v.name)
	}
	if v.state == "new" && p.state != stNew {
		return errorf(syscall.EBUSY, "%s: needs state new, process is %s", v.name, p.state)
	}
	err = v.apply(p, c.args)
	if v.name == "free" && err == nil {
		defer p.tab.remove(p)
	}
	return err
}

func (p *proc) startFromCtl(argv []string) error {
	return p.start(argv)
}

// signals are the names signal accepts (without "SIG").
var signals = map[string]syscall.Signal{
	"HUP": unix.SIGHUP, "INT": unix.SIGINT, "QUIT": unix.SIGQUIT, "KILL": unix.SIGKILL,
	"USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2, "PIPE": unix.SIGPIPE, "ALRM": unix.SIGALRM,
	"TERM": unix.SIGTERM, "CONT": unix.SIGCONT, "STOP": unix.SIGSTOP, "TSTP": unix.SIGTSTP,
	"WINCH": unix.SIGWINCH,
}

func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), n > 0 && n < 65
	}
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	return sig, ok
}

func (p *proc) signal(a []string) error {
	sig, ok := parseSignal(a[0])
	if !ok {
		return errorf(syscall.EINVAL, "signal: unknown signal %s", quote(a[0]))
	}
	if p.state != stRunning {
		return errorf(syscall.EBUSY, "signal: process is %s", p.state)
	}
	target := p.pid
	if len(a) == 2 {
		if a[1] != "group" {
			return errorf(syscall.EINVAL, "signal: want 'group', got %s", quote(a[1]))
		}
		target = -p.pid // Setsid made it a process group leader
	}
	if err := unix.Kill(target, sig); err != nil {
		return errorf(errnoSys(err), "signal: %v", err)
	}
	return nil
}

func (p *proc) closeStdinLocked() error {
	if p.state != stRunning {
		return errorf(syscall.EBUSY, "closestdin: process is %s", p.state)
	}
	if p.stdin == nil {
		return nil
	}
	if p.stdin == p.ptm {
		if _, err := p.ptm.Write([]byte{4}); err != nil { // ^D, VEOF
			return errorf(syscall.EIO, "closestdin: %v", err)
		}
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return errorf(syscall.EIO, "closestdin: %v", err)
	}
	return nil
}

// errLine is the text of the last failed ctl write, newline-terminated,
// or empty.
func (p *proc) errLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errText == "" {
		return ""
	}
	return p.errText + "\n"
}
