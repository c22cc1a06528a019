package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sandfs/ctl/msg"

	"golang.org/x/sys/unix"
)

// procState is the life of a process slot:
//
//	new ──start──▶ running ──exit──▶ exited | killed
//	 └───start fails──▶ failed
type procState int

const (
	stNew procState = iota
	stRunning
	stExited
	stKilled
	stFailed
)

func (s procState) String() string {
	return [...]string{"new", "running", "exited", "killed", "failed"}[s]
}

func (s procState) done() bool { return s >= stExited }

// maxBuffered is how much unread output one stream holds before the pump
// stops reading the pipe, so the process blocks in write(2) as it would on
// a full pipe: nothing is ever dropped, and memory stays bounded.
const maxBuffered = 1 << 20

// defaultPath is PATH for processes whose env does not set one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spec is a process's configuration, set by ctl verbs before start.
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

// outbuf is one output stream (stdout or stderr) of a process.
type outbuf struct {
	buf []byte // unread output
	eof bool   // the pipe is closed and everything read from it is in buf
}

// proc is one process record. It is owned by the procTable, not by any
// fid or connection, so a process outlives the 9P connection that started
// it. See the package doc for when it is freed.
type proc struct {
	n   int
	tab *procTable

	mu      sync.Mutex // guards everything below
	state   procState
	spec    spec
	pid     int
	code    int           // exit status, state exited
	sig     int           // terminating signal, state killed
	errno   syscall.Errno // why start failed, state failed
	errText string        // text of the last failed ctl write (the err file)
	stdin   *os.File      // pipe write end, or the pty master; nil once closed
	ptm     *os.File      // pty master, nil without a pty
	out     outbuf
	errs    outbuf
	change  chan struct{} // closed and replaced on every change above
	opens   int           // open handles on this slot's files
	ended   time.Time     // when the state became done
	freed   bool          // removed from the table
}

func newProc(n int, t *procTable) *proc {
	return &proc{n: n, tab: t, change: make(chan struct{})}
}

// notifyLocked wakes everyone blocked on p.change. Requires p.mu.
func (p *proc) notifyLocked() {
	close(p.change)
	p.change = make(chan struct{})
}

// statusLocked is the status line (see statusFile). Requires p.mu.
func (p *proc) statusLocked() string {
	switch p.state {
	case stRunning:
		return fmt.Sprintf("%d running pid=%d\n", p.n, p.pid)
	case stExited:
		return fmt.Sprintf("%d exited code=%d pid=%d\n", p.n, p.code, p.pid)
	case stKilled:
		return fmt.Sprintf("%d killed signal=%d pid=%d\n", p.n, p.sig, p.pid)
	case stFailed:
		return fmt.Sprintf("%d failed errno=%d\n", p.n, int(p.errno))
	}
	return fmt.Sprintf("%d new\n", p.n)
}

func (p *proc) config() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spec.config()
}

func (p *proc) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusLocked()
}

// ctlLine is what reading ctl returns: "n state pid".
func (p *proc) ctlLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d %s %d\n", p.n, p.state, p.pid)
}

// wait blocks until the process is done (or ctx ends, or the record is
// freed) and returns the status line.
func (p *proc) wait(ctx context.Context) (string, error) {
	p.mu.Lock()
	for !p.state.done() && !p.freed {
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", msg.Errorf(syscall.EINTR, "wait: connection closed")
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	return p.statusLocked(), nil
}

// read takes up to len(b) bytes of unread output from stream (1 stdout,
// 2 stderr), blocking until there is some. It returns io.EOF once the
// stream is closed and drained, the start failed or the record is freed;
// EINTR when ctx (the connection) ends.
func (p *proc) read(ctx context.Context, stream int, b []byte) (int, error) {
	p.mu.Lock()
	for {
		ob := &p.out
		if stream == 2 {
			ob = &p.errs
		}
		if len(ob.buf) > 0 {
			n := copy(b, ob.buf)
			ob.buf = ob.buf[n:]
			if len(ob.buf) == 0 {
				ob.buf = nil
			}
			p.notifyLocked() // the pump may be waiting for room
			p.mu.Unlock()
			return n, nil
		}
		if ob.eof || p.freed || p.state == stFailed {
			p.mu.Unlock()
			return 0, io.EOF
		}
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, msg.Errorf(syscall.EINTR, "read: connection closed")
		}
		p.mu.Lock()
	}
}

// pump copies a process's output pipe (or pty master) into ob until EOF.
func (p *proc) pump(f *os.File, ob *outbuf) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		for len(ob.buf) >= maxBuffered && !p.freed {
			ch := p.change
			p.mu.Unlock()
			<-ch
			p.mu.Lock()
		}
		p.mu.Unlock()
		n, err := f.Read(buf)
		p.mu.Lock()
		if n > 0 && !p.freed {
			ob.buf = append(ob.buf, buf[:n]...)
		}
		if err != nil {
			// EOF for a pipe; EIO for a pty master once no slave is open.
			ob.eof = true
		}
		p.notifyLocked()
		if err != nil {
			// A pty master is closed only once the process is gone:
			// closing it hangs the terminal up, and a process that has
			// closed its terminal fds but not yet exited (cat closes
			// stdin and stdout at the end of main) would die of SIGHUP.
			for f == p.ptm && !p.state.done() && !p.freed {
				ch := p.change
				p.mu.Unlock()
				<-ch
				p.mu.Lock()
			}
			p.mu.Unlock()
			f.Close()
			return
		}
		p.mu.Unlock()
	}
}

// writeStdin writes b to the process's stdin (or its terminal). It
// blocks while the pipe is full; it ends early, with what was written
// (EINTR if nothing), when ctx ends (flush, clunk, connection gone), and
// with EPIPE when stdin is closed or the process exits.
func (p *proc) writeStdin(ctx context.Context, b []byte) (int, error) {
	p.mu.Lock()
	f, st := p.stdin, p.state
	p.mu.Unlock()
	if f == nil {
		switch {
		case st == stNew:
			return 0, msg.Errorf(syscall.EBUSY, "stdin: process not started")
		case st == stRunning:
			return 0, msg.Errorf(syscall.EPIPE, "stdin: closed")
		}
		return 0, msg.Errorf(syscall.EPIPE, "stdin: process %s", st)
	}
	written := 0
	for written < len(b) {
		// Pipes and the pty master are pollable: a deadline turns a
		// blocked write into a chance to look at ctx.
		f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := f.Write(b[written:])
		written += n
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() == nil {
				continue
			}
			if written > 0 {
				return written, nil
			}
			return 0, msg.Errorf(syscall.EINTR, "stdin: write interrupted")
		}
		if written > 0 {
			return written, nil
		}
		return 0, msg.Errorf(syscall.EPIPE, "stdin: %v", err)
	}
	return written, nil
}

// exited records the exit status; it is the reaper's callback.
func (p *proc) exited(ws unix.WaitStatus) {
	p.mu.Lock()
	if ws.Signaled() {
		p.state, p.sig = stKilled, int(ws.Signal())
	} else {
		p.state, p.code = stExited, ws.ExitStatus()
	}
	p.ended = time.Now()
	if p.stdin != nil && p.stdin != p.ptm {
		p.stdin.Close()
	}
	p.stdin = nil
	p.notifyLocked()
	p.mu.Unlock()
	p.tab.scheduleFree(p)
}

// start starts the process described by p.spec with argv (ctl's start
// and exec, which the verb table runs in state new with p.mu held).
// Errors: ENOENT no such user, cwd or command; ENOTDIR cwd not a
// directory; EACCES command not executable; others from fork/exec. A
// failed start leaves the slot in state failed.
func (p *proc) start(argv []string) error {
	err := p.startLocked(argv)
	if err != nil {
		p.spec.argv = argv
		p.state = stFailed
		p.errno = msg.Errno(err)
		p.ended = time.Now()
		p.notifyLocked()
	}
	return err
}

func (p *proc) startLocked(argv []string) error {
	s := p.spec
	s.argv = argv
	userSpec := s.user
	if userSpec == "" {
		userSpec = "root"
	}
	cred, err := lookupUser(p.tab.etc, userSpec)
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

	var (
		files    [3]uintptr
		closeAft []*os.File // child ends, closed in the parent after fork
		outR     *os.File
		errR     *os.File
	)
	defer func() {
		for _, f := range closeAft {
			f.Close()
		}
	}()
	sys := &syscall.SysProcAttr{Setsid: true}
	if os.Geteuid() == 0 {
		sys.Credential = &syscall.Credential{Uid: cred.uid, Gid: cred.gid, Groups: cred.groups}
	}
	if s.pty {
		ptm, pts, err := openPTY(s.rows, s.cols)
		if err != nil {
			return msg.Errorf(msg.Errno(err), "start: pty: %v", err)
		}
		closeAft = append(closeAft, pts)
		if os.Geteuid() == 0 {
			unix.Fchown(int(pts.Fd()), int(cred.uid), -1) // best effort, like login(1)
		}
		fd := pts.Fd()
		files = [3]uintptr{fd, fd, fd}
		sys.Setctty, sys.Ctty = true, 0
		p.ptm, p.stdin, outR = ptm, ptm, ptm
	} else {
		if s.noStdin {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return msg.Errorf(msg.Errno(err), "start: %v", err)
			}
			closeAft = append(closeAft, null)
			files[0] = null.Fd()
		} else {
			r, w, err := os.Pipe()
			if err != nil {
				return msg.Errorf(msg.Errno(err), "start: %v", err)
			}
			closeAft = append(closeAft, r)
			files[0] = r.Fd()
			p.stdin = w
		}
		for i := 1; i <= 2; i++ {
			r, w, err := os.Pipe()
			if err != nil {
				p.closeStreamsLocked(outR)
				return msg.Errorf(msg.Errno(err), "start: %v", err)
			}
			closeAft = append(closeAft, w)
			files[i] = w.Fd()
			if i == 1 {
				outR = r
			} else {
				errR = r
			}
		}
	}
	attr := &syscall.ProcAttr{Dir: cwd, Env: env, Files: files[:], Sys: sys}
	pid, err := getReaper().start(argv0, argv, attr, p.exited)
	if err != nil {
		p.closeStreamsLocked(outR)
		if errR != nil {
			errR.Close()
		}
		return msg.Errorf(msg.Errno(err), "start: %s: %v", msg.Cite(argv[0]), err)
	}
	p.pid = pid
	p.state = stRunning
	p.spec.argv = argv
	go p.pump(outR, &p.out)
	if errR != nil {
		go p.pump(errR, &p.errs)
	} else {
		p.errs.eof = true // with a pty everything is on stdout
	}
	p.notifyLocked()
	return nil
}

func (p *proc) closeStreamsLocked(outR *os.File) {
	if outR != nil {
		outR.Close()
	}
	if p.stdin != nil && p.stdin != outR {
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

// openPTY opens a pseudo-terminal pair (ptmx(4), pts(4)): the master
// non-blocking (pollable), the slave blocking, both close-on-exec.
func openPTY(rows, cols uint16) (ptm, pts *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx")
	fail := func(e error) (*os.File, *os.File, error) { ptm.Close(); return nil, nil, e }
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt(3)
		return fail(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN) // ptsname(3)
	if err != nil {
		return fail(err)
	}
	if err := setWinsize(fd, rows, cols); err != nil {
		return fail(err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return ptm, os.NewFile(uintptr(sfd), "/dev/pts/"+strconv.Itoa(n)), nil
}

// setWinsize sets a terminal's size (TIOCSWINSZ); the kernel sends
// SIGWINCH to its foreground process group. Zero means the default 24x80.
func setWinsize(fd int, rows, cols uint16) error {
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}
