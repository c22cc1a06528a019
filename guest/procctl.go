package guest

import (
	"strconv"
	"strings"
	"syscall"

	"sandfs/ctl/msg"

	"golang.org/x/sys/unix"
)

// procVerb is the handler of a procs/<n>/ctl verb; it runs with p.mu
// held, once the slot is known to exist and to be in a state the verb
// needs.
type procVerb func(p *proc, a []string) error

// ctlVerbs is the grammar of procs/<n>/ctl (and of a clone handle), one
// message per write. The verbs before start only set configuration
// (state new, EBUSY otherwise).
var ctlVerbs = msg.Table[procVerb, procState]{
	{Name: "user", Usage: "user NAME|UID[:GID]", Min: 1, Max: 1, Needs: []procState{stNew},
		Doc: "run as this user (default root): uid, gid, supplementary groups from /etc/group, HOME/USER/LOGNAME/SHELL from /etc/passwd; a numeric UID[:GID] needs no passwd entry. Checked at start (ENOENT no such user).",
		Run: func(p *proc, a []string) error { p.spec.user = a[0]; return nil }},
	{Name: "cwd", Usage: "cwd DIR", Min: 1, Max: 1, Needs: []procState{stNew},
		Doc: "working directory (default: the user's home, or / if it has none); ~ and relative paths are against home. Checked at start (ENOENT, ENOTDIR).",
		Run: func(p *proc, a []string) error { p.spec.cwd = a[0]; return nil }},
	{Name: "env", Usage: "env K=V...", Min: 1, Max: msg.Many, Needs: []procState{stNew},
		Doc: "add environment variables (after PATH, HOME, USER, LOGNAME, SHELL, TERM with a pty; a later K replaces an earlier one).",
		Run: func(p *proc, a []string) error {
			for _, kv := range a {
				k, _, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return msg.Errorf(syscall.EINVAL, "env: want K=V, got %s", msg.Cite(kv))
				}
			}
			p.spec.env = append(p.spec.env, a...)
			return nil
		}},
	{Name: "pty", Usage: "pty on|off", Min: 1, Max: 1, Needs: []procState{stNew},
		Doc: "run on a new pseudo-terminal (controlling tty, new session): stdin and stdout are the terminal, stderr is empty.",
		Run: func(p *proc, a []string) error {
			on, err := onOff("pty", a[0])
			if err == nil {
				p.spec.pty = on
			}
			return err
		}},
	{Name: "tag", Usage: "tag TEXT", Min: 1, Max: 1,
		Doc: "a free-form label kept with the process (E2B's tag); shown in config.",
		Run: func(p *proc, a []string) error { p.spec.tag = a[0]; return nil }},
	{Name: "stdin", Usage: "stdin on|off", Min: 1, Max: 1, Needs: []procState{stNew},
		Doc: "on (default): stdin is a pipe fed by writes to the stdin file; off: /dev/null.",
		Run: func(p *proc, a []string) error {
			on, err := onOff("stdin", a[0])
			if err == nil {
				p.spec.noStdin = !on
			}
			return err
		}},
	{Name: "size", Usage: "size ROWS COLS", Min: 2, Max: 2,
		Doc: "terminal size (default 24 80); any state: resizes a running pty (TIOCSWINSZ, SIGWINCH).",
		Run: func(p *proc, a []string) error { return p.resize(a) }},
	{Name: "start", Usage: "start CMD [ARG...]", Min: 1, Max: msg.Many, Needs: []procState{stNew},
		Doc: "start CMD (searched in PATH unless it has a /) with these arguments. Errors: ENOENT no such user, cwd or command (text in err), EACCES not executable, EBUSY already started; a failed start leaves the slot failed.",
		Run: func(p *proc, a []string) error { return p.start(a) }},
	{Name: "exec", Usage: "exec 'SHELL COMMAND'", Min: 1, Max: 1, Needs: []procState{stNew},
		Doc: "start /bin/sh -c 'SHELL COMMAND' (same errors as start).",
		Run: func(p *proc, a []string) error { return p.start([]string{"/bin/sh", "-c", a[0]}) }},
	{Name: "signal", Usage: "signal SIG [group]", Min: 1, Max: 2, Needs: []procState{stRunning},
		Doc: "send SIG (TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH, with or without SIG, or a number) to the process, or to its process group with 'group'. EBUSY unless running.",
		Run: func(p *proc, a []string) error { return p.signal(a) }},
	{Name: "closestdin", Usage: "closestdin", Needs: []procState{stRunning},
		Doc: "close stdin (the process reads EOF); with a pty, send ^D (VEOF) instead. EBUSY unless running.",
		Run: func(p *proc, a []string) error { return p.closeStdinLocked() }},
	{Name: "free", Usage: "free", Needs: []procState{stNew, stExited, stKilled, stFailed},
		Doc: "forget a finished (or never started) process now: its files disappear and blocked readers get EOF. EBUSY while running.",
		Run: func(p *proc, a []string) error {
			p.freeLocked()
			p.tab.remove(p) // lock order: p.mu, then the table's
			return nil
		}},
}

// onOff parses the argument of an on|off verb.
func onOff(verb, arg string) (bool, error) {
	switch arg {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, msg.Errorf(syscall.EINVAL, "%s: want on or off, got %s", verb, msg.Cite(arg))
}

// ctl parses and applies one ctl message; a failure's text goes to the
// err file.
func (p *proc) ctl(m []byte) error {
	err := p.runCtl(m)
	if err != nil {
		p.mu.Lock()
		p.errText = err.Error()
		p.mu.Unlock()
	}
	return err
}

// runCtl parses m and runs its verb under p.mu if the slot's state
// allows it.
func (p *proc) runCtl(m []byte) error {
	c, err := ctlVerbs.Parse(rules, m)
	if err != nil {
		return err
	}
	v := c.Verb
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freed {
		return msg.Errorf(syscall.ENOENT, "%s: process freed", v.Name)
	}
	if !v.Allows(p.state) {
		return v.Refuse("process", p.state)
	}
	return v.Run(p, c.Args)
}

// resize sets the terminal size, and applies it to a running pty.
func (p *proc) resize(a []string) error {
	r, err1 := strconv.ParseUint(a[0], 10, 16)
	c, err2 := strconv.ParseUint(a[1], 10, 16)
	if err1 != nil || err2 != nil || r == 0 || c == 0 {
		return msg.Errorf(syscall.EINVAL, "size: want ROWS COLS, got %s", msg.Cite(strings.Join(a, " ")))
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
			return msg.Errorf(msg.Errno(err), "size: %v", err)
		}
	}
	return nil
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
		return msg.Errorf(syscall.EINVAL, "signal: unknown signal %s", msg.Cite(a[0]))
	}
	target := p.pid
	if len(a) == 2 {
		if a[1] != "group" {
			return msg.Errorf(syscall.EINVAL, "signal: want 'group', got %s", msg.Cite(a[1]))
		}
		target = -p.pid // Setsid made it a process group leader
	}
	if err := unix.Kill(target, sig); err != nil {
		return msg.Errorf(msg.Errno(err), "signal: %v", err)
	}
	return nil
}

// closeStdinLocked closes stdin of the running process. p.mu held.
func (p *proc) closeStdinLocked() error {
	if p.stdin == nil {
		return nil
	}
	if p.stdin == p.ptm {
		if _, err := p.ptm.Write([]byte{4}); err != nil { // ^D, VEOF
			return msg.Errorf(syscall.EIO, "closestdin: %v", err)
		}
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return msg.Errorf(syscall.EIO, "closestdin: %v", err)
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
