package ctl

import (
	"context"
	"strconv"
	"strings"
	"syscall"

	"sandfs/ctl/msg"
)

// NetPorts is the text of net/ports: one line per guest TCP port exposed
// to the host, "<guest port> <host address>" (Networked.Ports); empty
// when none, or when the sandbox has no running machine.
func (s *Sandbox) NetPorts() string {
	s.mu.Lock()
	m := s.m
	st := s.state
	s.mu.Unlock()
	if nm, ok := m.(Networked); ok && (st == StateRunning || st == StatePaused) {
		return nm.Ports()
	}
	return ""
}

// NetPortsCtl executes one message written to net/ports: "expose
// <port>" makes guest TCP port 1..65535 reachable on the host's
// loopback (read net/ports for the address), "unexpose <port>" ends
// that. Owner or root; the sandbox must be running or paused; an
// exposure lasts as long as its machine (a rollback or restore ends
// it). A failure's text is in s's err.
func (s *Sandbox) NetPortsCtl(ctx context.Context, m []byte) error {
	err := s.netPortsCtl(ctx, m)
	if err != nil {
		s.Fail("net/ports", err)
	}
	return err
}

func (s *Sandbox) netPortsCtl(ctx context.Context, m []byte) error {
	f := strings.Fields(strings.TrimSuffix(string(m), "\n"))
	if len(m) > 64 || len(f) != 2 || (f[0] != "expose" && f[0] != "unexpose") {
		return Errorf(syscall.EINVAL, "ports: want \"expose <port>\" or \"unexpose <port>\", not %s", msg.Cite(string(m)))
	}
	p, err := strconv.ParseUint(f[1], 10, 16)
	if err != nil || p == 0 {
		return Errorf(syscall.EINVAL, "%s: bad port %s (want 1..65535)", f[0], msg.Cite(f[1]))
	}
	if err := s.mayControl(ctx, f[0]); err != nil {
		return err
	}
	s.op.Lock()
	defer s.op.Unlock()
	nm, ok := s.m.(Networked)
	if s.state != StateRunning && s.state != StatePaused || !ok {
		return Errorf(syscall.EBUSY, "%s: sandbox %s is %s; needs running or paused, with a network", f[0], msg.Cite(s.id), s.state)
	}
	if f[0] == "unexpose" {
		return nm.Unexpose(uint16(p))
	}
	_, err = nm.Expose(uint16(p))
	return err
}
