package e2b

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"sandfs/fs/client"
)

// proc is a started process being followed.
type proc struct {
	dir string // sandboxes/<id>/procs/<n>/
	pid uint32
	pty bool // output comes as pty data
}

// chunk is the most one data event carries (envd's 32 KiB).
const chunk = 32 << 10

// follow streams p's start event, its stdout and stderr as data events
// until both end, then its end event from procs/<n>/wait. c is the
// call's own connection: closing it ends the blocked reads. When the
// call's deadline (Connect-Timeout-Ms) passes, the process is killed as
// envd does; when the client goes away it is left running.
func (s *Server) follow(ctx context.Context, c *client.Client, sc *sandboxCall, p proc, st *connect.ServerStream[streamEvent]) error {
	var mu sync.Mutex
	send := func(ev processEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return st.Send(&streamEvent{Event: ev})
	}
	if err := send(processEvent{Start: &startEvent{Pid: p.pid}}); err != nil {
		return err
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			sc.c.WriteMsg(p.dir+"ctl", "signal KILL", "")
		}
		c.Close()
	})
	defer stop()
	go keepalive(done, st.Conn().RequestHeader().Get("Keepalive-Ping-Interval"), send)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, name := range []string{"stdout", "stderr"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- copyStream(c, p.dir+name, func(b []byte) error {
				d := &dataEvent{}
				switch {
				case p.pty:
					d.Pty = b
				case name == "stdout":
					d.Stdout = b
				default:
					d.Stderr = b
				}
				return send(processEvent{Data: d})
			})
		}()
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		if err != nil {
			return streamErr(ctx, err)
		}
	}
	b, err := c.ReadFileMax(p.dir+"wait", maxStatus)
	if err != nil {
		return streamErr(ctx, err)
	}
	return send(processEvent{End: endOf(string(b))})
}

// streamErr is the error a stream ends with: the context's when it
// ended (deadline: deadline_exceeded), else the tree's.
func streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("command timed out"))
	}
	return rpcError(err)
}

// copyStream reads the stream file at path and hands each chunk to fn
// until its end.
func copyStream(c *client.Client, path string, fn func([]byte) error) error {
	f, err := c.Open(path, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		b := make([]byte, chunk)
		n, err := f.Read(b)
		if n > 0 {
			if err := fn(b[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// keepalive sends a keepalive event every interval seconds (the
// Keepalive-Ping-Interval header; none without it) until done.
func keepalive(done <-chan struct{}, interval string, send func(processEvent) error) {
	sec, err := strconv.Atoi(interval)
	if err != nil || sec <= 0 {
		return
	}
	t := time.NewTicker(time.Duration(sec) * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if send(processEvent{Keepalive: &empty{}}) != nil {
				return
			}
		}
	}
}

// endOf is the end event of a procs/<n>/wait line, as envd fills it
// from Go's exec: "n exited code=C pid=P" → exitCode C, "exit status C";
// "n killed signal=S pid=P" → exitCode -1, "signal: killed".
func endOf(line string) *endEvent {
	f := strings.Fields(line)
	kv := map[string]string{}
	for _, w := range f[min(2, len(f)):] {
		k, v, _ := strings.Cut(w, "=")
		kv[k] = v
	}
	state := ""
	if len(f) > 1 {
		state = f[1]
	}
	ev := &endEvent{ExitCode: -1}
	switch state {
	case "exited":
		code, _ := strconv.Atoi(kv["code"])
		ev.ExitCode, ev.Exited = int32(code), true
		ev.Status = "exit status " + kv["code"]
	case "killed":
		sig, _ := strconv.Atoi(kv["signal"])
		ev.Status = "signal: " + signalName(sig)
	default:
		ev.Status = strings.TrimSpace(line)
	}
	if ev.ExitCode != 0 {
		e := ev.Status
		ev.Error = &e
	}
	return ev
}

// signalName is Go's os.Signal text of the common signals.
func signalName(sig int) string {
	switch syscall.Signal(sig) {
	case syscall.SIGKILL:
		return "killed"
	case syscall.SIGTERM:
		return "terminated"
	case syscall.SIGINT:
		return "interrupt"
	case syscall.SIGHUP:
		return "hangup"
	}
	return syscall.Signal(sig).String()
}
