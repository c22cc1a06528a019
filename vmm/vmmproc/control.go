package vmmproc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/vmm"
)

// controlServer serves the control protocol documented in doc.go on the
// control socket: one request per line, in package msg's grammar (Text
// rules, at most msg.Max bytes), one reply line per request:
//
//	ok [text]              the request's reply
//	err <ERRNO> <text>     msg.Line: the errno's name, then `verb: reason`
//
// so the daemon gets errno and text back (Process.request, msg.ParseLine).
type controlServer struct {
	m       machine
	cfg     *Config
	stopped chan struct{} // closed once a stop request has been answered
}

// machine is what the control drives: a *vmm.Machine (a fake in tests).
type machine interface {
	Pause() error
	Resume() error
	Paused() bool
	SaveDir(dir string) error
	Stop()
	Exit() (vmm.ExitReason, error)
	CPUs() int
	MemBytes() uint64
}

var _ machine = (*vmm.Machine)(nil)

// controlVerb is the handler of a control request: it returns the reply's
// text after "ok"; stop ends the process once the reply is sent.
type controlVerb func(s *controlServer, a []string) (reply string, stop bool, err error)

// controlVerbs are the control requests, documented in doc.go.
var controlVerbs = msg.Table[controlVerb, msg.Stateless]{
	{Name: "status", Usage: "status", Run: (*controlServer).status,
		Doc: "reply <state> cpus=<n> mem=<bytes> pid=<pid>; state: running, paused or ended:<reason>."},
	{Name: "pause", Usage: "pause", Run: (*controlServer).pause,
		Doc: "park the vCPUs outside KVM_RUN and quiesce the devices."},
	{Name: "resume", Usage: "resume", Run: (*controlServer).resume,
		Doc: "run the vCPUs again (nothing if not paused)."},
	{Name: "save", Usage: "save <dir>", Min: 1, Max: 1, Run: (*controlServer).save,
		Doc: "paused only: write <dir>/state.json and <dir>/mem; reply <dir>."},
	{Name: "stop", Usage: "stop", Run: (*controlServer).stop,
		Doc: "stop the machine; the process then exits with status 0."},
}

// testVerbs are controlVerbs and, with Config.TestHooks, the x- requests
// tests use.
var testVerbs = append(controlVerbs[:len(controlVerbs):len(controlVerbs)],
	msg.Verb[controlVerb, msg.Stateless]{Name: "x-syscall", Usage: "x-syscall <nr>", Min: 1, Max: 1, Run: (*controlServer).xSyscall,
		Doc: "make syscall nr with zero arguments (to test the seccomp filter); reply errno=<n>."},
)

func (s *controlServer) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.conn(c)
	}
}

func (s *controlServer) conn(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 512), msg.Max)
	for sc.Scan() {
		reply, stop := s.handle(sc.Text())
		c.Write([]byte(reply + "\n"))
		if stop {
			close(s.stopped)
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		c.Write([]byte("err " + msg.Line(msg.Errorf(syscall.E2BIG, "ctl: message too long (max %d)", msg.Max)) + "\n"))
	}
}

// handle runs one request line and returns the reply line.
func (s *controlServer) handle(line string) (reply string, stop bool) {
	verbs := controlVerbs
	if s.cfg.TestHooks {
		verbs = testVerbs
	}
	c, err := verbs.Parse(msg.Rules{}, []byte(line))
	if err != nil {
		return "err " + msg.Line(err), false
	}
	text, stop, err := c.Verb.Run(s, c.Args)
	if err != nil {
		e := &msg.Error{Errno: msg.Errno(err), Text: err.Error()}
		if !strings.HasPrefix(e.Text, c.Verb.Name+":") {
			e.Text = c.Verb.Name + ": " + e.Text
		}
		return "err " + msg.Line(e), false
	}
	if text != "" {
		return "ok " + text, stop
	}
	return "ok", stop
}

func (s *controlServer) status(a []string) (string, bool, error) {
	m := s.m
	state := "running"
	if r, _ := m.Exit(); r != vmm.ExitRunning {
		state = "ended:" + string(r)
	} else if m.Paused() {
		state = "paused"
	}
	return fmt.Sprintf("%s cpus=%d mem=%d pid=%d", state, m.CPUs(), m.MemBytes(), os.Getpid()), false, nil
}

func (s *controlServer) pause(a []string) (string, bool, error) { return "", false, s.m.Pause() }

func (s *controlServer) resume(a []string) (string, bool, error) { return "", false, s.m.Resume() }

func (s *controlServer) save(a []string) (string, bool, error) {
	if err := s.m.SaveDir(a[0]); err != nil {
		return "", false, err
	}
	return a[0], false, nil
}

func (s *controlServer) stop(a []string) (string, bool, error) {
	s.m.Stop()
	return "", true, nil
}

func (s *controlServer) xSyscall(a []string) (string, bool, error) {
	var nr uintptr
	fmt.Sscan(a[0], &nr)
	_, _, e := unix.Syscall(nr, 0, 0, 0)
	return fmt.Sprintf("errno=%d", e), false, nil
}
