package guest

import (
	"cmp"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sandfs/ctl/msg"

	"golang.org/x/sys/unix"
)

// spec is a process's configuration, set by ctl verbs before start;
// start turns it into a running process (user, cwd, environment,
// command, stdio, fork).
type spec struct {
	user       string   // "" = root
	cwd        string   // "" = the user's home
	env        []string // K=V in the order given; later wins
	pty        bool
	rows, cols uint16
	noStdin    bool // stdin is /dev/null instead of a pipe
	tag        string
	argv       []string // set by start
}

// config is the config file's text: the ctl messages that would set up
// the same process again, one per line, ending with its start line
// (when started). Replaying the lines into a new clone recreates it.
func (s spec) config() string {
	var b strings.Builder
	line := func(words ...string) {
		for i, w := range words {
			if i > 0 {
				b.WriteByte(' ')
				w = msg.Quote(w)
			}
			b.WriteString(w)
		}
		b.WriteByte('\n')
	}
	if s.user != "" {
		line("user", s.user)
	}
	if s.cwd != "" {
		line("cwd", s.cwd)
	}
	for _, kv := range s.env {
		line("env", kv)
	}
	if s.pty {
		line("pty", "on")
	}
	if s.rows != 0 {
		line("size", strconv.Itoa(int(s.rows)), strconv.Itoa(int(s.cols)))
	}
	if s.noStdin {
		line("stdin", "off")
	}
	if s.tag != "" {
		line("tag", s.tag)
	}
	if len(s.argv) > 0 {
		line(append([]string{"start"}, s.argv...)...)
	}
	return b.String()
}

// defaultPath is PATH for processes whose env does not set one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// start starts the process described by p.spec with argv (ctl's start
// and exec, which the verb table runs in state new with p.mu held).
// Errors: ENOENT no such user, cwd or command; ENOTDIR cwd not a
// directory; EACCES command not executable; others from fork/exec. A
// failed start leaves the slot in state failed.
func (p *proc) start(argv []string) error {
	err := p.spawnLocked(argv)
	if err != nil {
		p.spec.argv = argv
		p.state = stFailed
		p.errno = msg.Errno(err)
		p.ended = time.Now()
		p.notifyLocked()
	}
	return err
}

// spawnLocked forks argv as the process p.spec describes: it resolves
// the user, cwd, environment and command, opens the stdio and starts the
// output pumps. On error nothing is left open.
func (p *proc) spawnLocked(argv []string) error {
	s := p.spec
	s.argv = argv
	cred, err := lookupUser(p.tab.etc, cmp.Or(s.user, "root"))
	if err != nil {
		return msg.Errorf(msg.Errno(err), "start: %s", err)
	}
	cwd, err := resolveCwd(s.cwd, cred.home)
	if err != nil {
		return err
	}
	env := buildEnv(cred, s)
	argv0, err := lookPath(argv[0], cwd, envGet(env, "PATH"))
	if err != nil {
		return err
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if os.Geteuid() == 0 {
		sys.Credential = &syscall.Credential{Uid: cred.uid, Gid: cred.gid, Groups: cred.groups}
	}
	var fds stdio
	defer fds.closeChildEnds()
	if s.pty {
		err = p.openPTYStdioLocked(&fds, s, cred, sys)
	} else {
		err = p.openPipeStdioLocked(&fds, s.noStdin)
	}
	if err != nil {
		return err
	}
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Files: fds.files[:], Sys: sys}
	pid, err := getReaper().start(argv0, argv, attr, p.exited)
	if err != nil {
		p.closeParentEndsLocked(&fds)
		return msg.Errorf(msg.Errno(err), "start: %s: %v", msg.Cite(argv[0]), err)
	}
	p.pid = pid
	p.state = stRunning
	p.spec.argv = argv
	go p.pump(fds.outR, &p.out)
	if fds.errR != nil {
		go p.pump(fds.errR, &p.errs)
	} else {
		p.errs.eof = true // with a pty everything is on stdout
	}
	p.notifyLocked()
	return nil
}

// stdio is a new process's standard descriptors: files as the child gets
// them, the parent's ends of its output (outR; errR, nil with a pty,
// where everything is on stdout) and the child's ends, which the parent
// closes once the child is forked. The parent's end of stdin is p.stdin.
type stdio struct {
	files     [3]uintptr
	childEnds []*os.File
	outR      *os.File
	errR      *os.File
}

func (fds *stdio) closeChildEnds() {
	for _, f := range fds.childEnds {
		f.Close()
	}
}

// openPTYStdioLocked gives the process a new terminal as stdin, stdout
// and stderr, and as its controlling terminal; the master is p.ptm and
// p.stdin.
func (p *proc) openPTYStdioLocked(fds *stdio, s spec, cred credential, sys *syscall.SysProcAttr) error {
	ptm, pts, err := openPTY(s.rows, s.cols)
	if err != nil {
		return msg.Errorf(msg.Errno(err), "start: pty: %v", err)
	}
	fds.childEnds = append(fds.childEnds, pts)
	if os.Geteuid() == 0 {
		unix.Fchown(int(pts.Fd()), int(cred.uid), -1) // best effort, like login(1)
	}
	fd := pts.Fd()
	fds.files = [3]uintptr{fd, fd, fd}
	sys.Setctty, sys.Ctty = true, 0
	p.ptm, p.stdin, fds.outR = ptm, ptm, ptm
	return nil
}

// openPipeStdioLocked gives the process a pipe (p.stdin its write end)
// or, with noStdin, /dev/null as stdin, and a pipe each as stdout and
// stderr.
func (p *proc) openPipeStdioLocked(fds *stdio, noStdin bool) error {
	if noStdin {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return msg.Errorf(msg.Errno(err), "start: %v", err)
		}
		fds.childEnds = append(fds.childEnds, null)
		fds.files[0] = null.Fd()
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return msg.Errorf(msg.Errno(err), "start: %v", err)
		}
		fds.childEnds = append(fds.childEnds, r)
		fds.files[0] = r.Fd()
		p.stdin = w
	}
	for i := 1; i <= 2; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeParentEndsLocked(fds)
			return msg.Errorf(msg.Errno(err), "start: %v", err)
		}
		fds.childEnds = append(fds.childEnds, w)
		fds.files[i] = w.Fd()
		if i == 1 {
			fds.outR = r
		} else {
			fds.errR = r
		}
	}
	return nil
}

// closeParentEndsLocked closes what the parent holds of a process's
// stdio when its start fails: p.stdin (and p.ptm), outR, errR.
func (p *proc) closeParentEndsLocked(fds *stdio) {
	if fds.outR != nil {
		fds.outR.Close()
	}
	if fds.errR != nil {
		fds.errR.Close()
	}
	if p.stdin != nil && p.stdin != fds.outR {
		p.stdin.Close()
	}
	p.stdin, p.ptm = nil, nil
}

// resolveCwd applies E2B's rules: empty is home (or / if home is
// missing); ~ and relative paths are against home. The directory must
// exist: ENOENT or ENOTDIR otherwise.
func resolveCwd(cwd, home string) (string, error) {
	if cwd == "" {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			return home, nil
		}
		return "/", nil
	}
	d := cwd
	switch {
	case d == "~":
		d = home
	case strings.HasPrefix(d, "~/"):
		d = filepath.Join(home, d[2:])
	case !filepath.IsAbs(d):
		d = filepath.Join(home, d)
	}
	fi, err := os.Stat(d)
	if err != nil {
		return "", msg.Errorf(msg.Errno(err), "start: cwd %s does not exist", msg.Cite(cwd))
	}
	if !fi.IsDir() {
		return "", msg.Errorf(syscall.ENOTDIR, "start: cwd %s is not a directory", msg.Cite(cwd))
	}
	return d, nil
}

// buildEnv is the user's PATH, HOME, USER, LOGNAME, SHELL (and TERM with
// a pty), then the env verbs in order; a later K= replaces an earlier one.
func buildEnv(c credential, s spec) []string {
	env := []string{"PATH=" + defaultPath, "HOME=" + c.home, "USER=" + c.name, "LOGNAME=" + c.name, "SHELL=" + c.shell}
	if s.pty {
		env = append(env, "TERM=xterm-256color")
	}
	for _, kv := range s.env {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i := range env {
			if strings.HasPrefix(env[i], k+"=") {
				env[i], replaced = kv, true
				break
			}
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	return env
}

func envGet(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds cmd as execve(2) will see it: a name with a slash is
// taken as is (relative to cwd), a bare name is searched in path.
func lookPath(cmd, cwd, path string) (string, error) {
	if cmd == "" {
		return "", msg.Errorf(syscall.ENOENT, "start: empty command")
	}
	check := func(p string) error {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return syscall.EACCES
		}
		return nil
	}
	if strings.Contains(cmd, "/") {
		if err := check(cmd); err != nil {
			if msg.Errno(err) == syscall.ENOENT {
				return "", msg.Errorf(syscall.ENOENT, "start: command %s not found", msg.Cite(cmd))
			}
			return "", msg.Errorf(msg.Errno(err), "start: command %s: %v", msg.Cite(cmd), err)
		}
		return cmd, nil
	}
	denied := false
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		err := check(p)
		if err == nil {
			if !filepath.IsAbs(p) {
				p = filepath.Join(cwd, p)
			}
			return p, nil
		}
		if err == syscall.EACCES {
			denied = true
		}
	}
	if denied {
		return "", msg.Errorf(syscall.EACCES, "start: command %s: permission denied", msg.Cite(cmd))
	}
	return "", msg.Errorf(syscall.ENOENT, "start: command %s not found in PATH", msg.Cite(cmd))
}
