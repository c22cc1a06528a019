package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"sandfs/ctl/msg"
	"sandfs/fs/client"
)

// The process.Process service on a sandbox's procs/ (guest/doc.go, "E2B
// process API on these files"): Start is procs/clone plus its setup
// messages and `start`; a process's pid is the one its status names.

const procSvc = "/process.Process/"

func (s *Server) processHandlers(opts []connect.HandlerOption) []route {
	return []route{
		{procSvc + "Start", connect.NewServerStreamHandler(procSvc+"Start", s.startProc, opts...)},
		{procSvc + "Connect", connect.NewServerStreamHandler(procSvc+"Connect", s.connectProc, opts...)},
		{procSvc + "List", connect.NewUnaryHandler(procSvc+"List", s.listProcs, opts...)},
		{procSvc + "SendInput", connect.NewUnaryHandler(procSvc+"SendInput", s.sendInput, opts...)},
		{procSvc + "SendSignal", connect.NewUnaryHandler(procSvc+"SendSignal", s.sendSignal, opts...)},
		{procSvc + "CloseStdin", connect.NewUnaryHandler(procSvc+"CloseStdin", s.closeStdin, opts...)},
		{procSvc + "Update", connect.NewUnaryHandler(procSvc+"Update", s.update, opts...)},
	}
}

func procsDir(id string) string { return "sandboxes/" + id + "/procs/" }

// startMsgs are the procs/<n>/ctl messages of an E2B Start: user, cwd,
// the sandbox's envs then the request's, pty and size or stdin off, tag,
// then start.
func startMsgs(rec *Record, user string, req *startRequest) []string {
	m := []string{"user " + msg.Quote(user)}
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		m = append(m, "cwd "+msg.Quote(*req.Process.Cwd))
	}
	for _, envs := range []map[string]string{rec.Envs, req.Process.Envs} {
		keys := make([]string, 0, len(envs))
		for k := range envs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m = append(m, "env "+msg.Quote(k+"="+envs[k]))
		}
	}
	switch {
	case req.Pty != nil:
		m = append(m, "pty on")
		if sz := req.Pty.Size; sz != nil && sz.Rows > 0 && sz.Cols > 0 {
			m = append(m, fmt.Sprintf("size %d %d", sz.Rows, sz.Cols))
		}
	case req.Stdin != nil && !*req.Stdin:
		m = append(m, "stdin off")
	}
	if req.Tag != nil && *req.Tag != "" {
		m = append(m, "tag "+msg.Quote(*req.Tag))
	}
	start := "start " + msg.Quote(req.Process.Cmd)
	for _, a := range req.Process.Args {
		start += " " + msg.Quote(a)
	}
	return append(m, start)
}

// startProc is Process.Start: a slot from procs/clone, the setup
// messages written to it, then its output and end streamed.
func (s *Server) startProc(ctx context.Context, req *connect.Request[startRequest], st *connect.ServerStream[streamEvent]) error {
	sc := sandboxOfCtx(ctx)
	if req.Msg.Process.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("start: no command"))
	}
	c, err := s.streamTree(ctx, sc.key)
	if err != nil {
		return rpcError(err)
	}
	defer c.Close()
	dir := procsDir(sc.rec.ID)
	errPath := "sandboxes/" + sc.rec.ID + "/err"
	clone, err := c.Open(dir+"clone", syscall.O_RDWR)
	if err != nil {
		return rpcError(err)
	}
	defer clone.Close()
	b := make([]byte, 32)
	n, err := clone.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		return rpcError(err)
	}
	slot := strings.TrimSpace(string(b[:n]))
	for _, m := range startMsgs(sc.rec, requestUser(req.Header(), ""), req.Msg) {
		if err := clone.Msg(m, errPath); err != nil {
			if en := msg.Errno(err); en == syscall.ENOENT || en == syscall.ENOTDIR {
				return connect.NewError(connect.CodeInvalidArgument, err)
			}
			return rpcError(err)
		}
	}
	p := proc{dir: dir + slot + "/", pty: req.Msg.Pty != nil}
	if p.pid, err = readPid(c, p.dir); err != nil {
		return rpcError(err)
	}
	s.pids.put(sc.rec.ID, p.pid, slot)
	return s.follow(ctx, c, sc, p, st)
}

// connectProc is Process.Connect: follow a running process's output.
func (s *Server) connectProc(ctx context.Context, req *connect.Request[connectRequest], st *connect.ServerStream[streamEvent]) error {
	sc := sandboxOfCtx(ctx)
	slot, err := s.findSlot(sc, req.Msg.Process)
	if err != nil {
		return err
	}
	c, err := s.streamTree(ctx, sc.key)
	if err != nil {
		return rpcError(err)
	}
	defer c.Close()
	p := proc{dir: procsDir(sc.rec.ID) + slot + "/"}
	if p.pid, err = readPid(c, p.dir); err != nil {
		return rpcError(err)
	}
	cfg, _ := c.ReadFileMax(p.dir+"config", maxConfig)
	p.pty = strings.Contains("\n"+string(cfg), "\npty on\n")
	return s.follow(ctx, c, sc, p, st)
}

// Bounds of the agent's process files the adapter reads whole (the
// guest writes them, so they could be endless): a status or wait line,
// and a config (its ctl messages, each at most 64 KiB in the agent).
const (
	maxStatus = 4 << 10
	maxConfig = 1 << 20
)

// readPid reads the pid= of a process's status line.
func readPid(c *client.Client, dir string) (uint32, error) {
	b, err := c.ReadFileMax(dir+"status", maxStatus)
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			n, err := strconv.ParseUint(v, 10, 32)
			return uint32(n), err
		}
	}
	return 0, msg.Errorf(syscall.EIO, "start: no pid in status %q", strings.TrimSpace(string(b)))
}

// pidTable remembers which slot of which sandbox each pid is (the slot
// is found by scanning procs/ when it is not known here).
type pidTable struct {
	mu sync.Mutex
	m  map[string]map[uint32]string
}

func (t *pidTable) put(id string, pid uint32, slot string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]map[uint32]string{}
	}
	if t.m[id] == nil {
		t.m[id] = map[uint32]string{}
	}
	t.m[id][pid] = slot
}

func (t *pidTable) get(id string, pid uint32) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot, ok := t.m[id][pid]
	return slot, ok
}

// findSlot is the slot of the process sel selects: by pid, known or
// found in the procs/<n>/status lines; by tag, in their config. None:
// not_found.
func (s *Server) findSlot(sc *sandboxCall, sel processSelector) (string, error) {
	if sel.Pid != nil {
		if slot, ok := s.pids.get(sc.rec.ID, *sel.Pid); ok {
			return slot, nil
		}
	}
	dir := procsDir(sc.rec.ID)
	ents, err := sc.c.ReadDir(dir)
	if err != nil {
		return "", rpcError(err)
	}
	for _, e := range ents {
		if e.Name == "clone" {
			continue
		}
		switch {
		case sel.Pid != nil:
			if pid, err := readPid(sc.c, dir+e.Name+"/"); err == nil && pid == *sel.Pid {
				s.pids.put(sc.rec.ID, pid, e.Name)
				return e.Name, nil
			}
		case sel.Tag != nil:
			b, _ := sc.c.ReadFileMax(dir+e.Name+"/config", maxConfig)
			if _, tag := parseConfig(string(b)); tag != nil && *tag == *sel.Tag {
				return e.Name, nil
			}
		}
	}
	return "", connect.NewError(connect.CodeNotFound, errors.New("process not found"))
}
