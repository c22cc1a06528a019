package e2b

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"sandfs/ctl/msg"
)

// listProcs is Process.List: every running procs/<n>/, its config and pid.
func (s *Server) listProcs(ctx context.Context, _ *connect.Request[empty]) (*connect.Response[listResponse], error) {
	sc := sandboxOfCtx(ctx)
	dir := procsDir(sc.rec.ID)
	ents, err := sc.c.ReadDir(dir)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &listResponse{Processes: []processInfo{}}
	for _, e := range ents {
		if e.Name == "clone" {
			continue
		}
		st, err := sc.c.ReadFileMax(dir+e.Name+"/status", maxStatus)
		if err != nil || !strings.Contains(string(st), " running ") {
			continue
		}
		pid, err := readPid(sc.c, dir+e.Name+"/")
		if err != nil {
			continue
		}
		b, err := sc.c.ReadFileMax(dir+e.Name+"/config", maxConfig)
		if err != nil {
			continue
		}
		cfg, tag := parseConfig(string(b))
		out.Processes = append(out.Processes, processInfo{Config: cfg, Pid: pid, Tag: tag})
	}
	return connect.NewResponse(out), nil
}

// configRules are the agent's procs/<n>/ctl message rules (quoted parts
// may hold newlines).
var configRules = msg.Rules{Script: true, Max: 1 << 20}

// parseConfig reads a procs/<n>/config: one ctl message a line (a
// quoted newline continues it), ending with the start line.
func parseConfig(text string) (processConfig, *string) {
	var cfg processConfig
	var tag *string
	pending := ""
	for line := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		if pending != "" {
			line = pending + "\n" + line
		}
		words, err := configRules.Split([]byte(line))
		if err != nil {
			pending = line
			continue
		}
		pending = ""
		switch words[0] {
		case "cwd":
			if len(words) > 1 {
				cwd := words[1]
				cfg.Cwd = &cwd
			}
		case "env":
			for _, kv := range words[1:] {
				k, v, _ := strings.Cut(kv, "=")
				if cfg.Envs == nil {
					cfg.Envs = map[string]string{}
				}
				cfg.Envs[k] = v
			}
		case "tag":
			if len(words) > 1 {
				t := words[1]
				tag = &t
			}
		case "start":
			if len(words) > 1 {
				cfg.Cmd, cfg.Args = words[1], words[2:]
			}
		case "exec":
			if len(words) > 1 {
				cfg.Cmd, cfg.Args = "/bin/sh", []string{"-c", words[1]}
			}
		}
	}
	return cfg, tag
}

// procMsg writes m to the ctl of the process sel selects.
func (s *Server) procMsg(ctx context.Context, sel processSelector, m string) error {
	sc := sandboxOfCtx(ctx)
	slot, err := s.findSlot(sc, sel)
	if err != nil {
		return err
	}
	dir := procsDir(sc.rec.ID) + slot + "/"
	if err := sc.c.WriteMsg(dir+"ctl", m, "sandboxes/"+sc.rec.ID+"/err"); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			// not running any more: gone, as far as E2B is concerned
			return connect.NewError(connect.CodeNotFound, err)
		}
		return rpcError(err)
	}
	return nil
}

// sendSignal is Process.SendSignal: `signal KILL` (or TERM).
func (s *Server) sendSignal(ctx context.Context, req *connect.Request[sendSignalRequest]) (*connect.Response[empty], error) {
	sig := "KILL"
	switch req.Msg.Signal {
	case "SIGNAL_SIGTERM", "15":
		sig = "TERM"
	case "SIGNAL_SIGKILL", "9":
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal: unknown signal %q", req.Msg.Signal))
	}
	if err := s.procMsg(ctx, req.Msg.Process, "signal "+sig); err != nil {
		return nil, err
	}
	return connect.NewResponse(&empty{}), nil
}

// closeStdin is Process.CloseStdin: `closestdin`.
func (s *Server) closeStdin(ctx context.Context, req *connect.Request[closeStdinRequest]) (*connect.Response[empty], error) {
	if err := s.procMsg(ctx, req.Msg.Process, "closestdin"); err != nil {
		return nil, err
	}
	return connect.NewResponse(&empty{}), nil
}

// update is Process.Update: a pty's new size, `size ROWS COLS`.
func (s *Server) update(ctx context.Context, req *connect.Request[updateRequest]) (*connect.Response[empty], error) {
	if p := req.Msg.Pty; p != nil && p.Size != nil {
		if err := s.procMsg(ctx, req.Msg.Process, fmt.Sprintf("size %d %d", p.Size.Rows, p.Size.Cols)); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&empty{}), nil
}

// sendInput is Process.SendInput: the bytes written to procs/<n>/stdin
// (a pty's input goes there too).
func (s *Server) sendInput(ctx context.Context, req *connect.Request[sendInputRequest]) (*connect.Response[empty], error) {
	sc := sandboxOfCtx(ctx)
	slot, err := s.findSlot(sc, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	data := req.Msg.Input.Stdin
	if data == nil {
		data = req.Msg.Input.Pty
	}
	f, err := sc.c.Open(procsDir(sc.rec.ID)+slot+"/stdin", syscall.O_WRONLY)
	if err != nil {
		return nil, rpcError(err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}
