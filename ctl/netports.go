package ctl

import (
	"context"
	"net/netip"
	"slices"
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

// Exposure is a guest TCP port exposed to the host (net/ports) and the
// loopback address it was last given, kept in the sandbox's record.
type Exposure struct {
	Guest uint16 `json:"guest"`
	Host  string `json:"host,omitempty"` // e.g. "127.0.0.1:41234"
}

// maxExposures bounds a record's exposures (sbnet's own bound is the
// same).
const maxExposures = 64

// validExposures checks a record's exposures: at most maxExposures,
// ports 1..65535, each once, host addresses on 127.0.0.1 (a record is
// the daemon's, but it is read back from disk).
func validExposures(es []Exposure) bool {
	if len(es) > maxExposures {
		return false
	}
	seen := map[uint16]bool{}
	for _, e := range es {
		if e.Guest == 0 || seen[e.Guest] {
			return false
		}
		seen[e.Guest] = true
		if e.Host == "" {
			continue
		}
		if a, err := netip.ParseAddrPort(e.Host); err != nil || a.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return false
		}
	}
	return true
}

// NetPortsCtl executes one message written to net/ports: "expose
// <port>" makes guest TCP port 1..65535 reachable on the host's
// loopback (read net/ports for the address) for s's owner and root
// (another local user's connection is reset), "unexpose <port>" ends
// that. Owner or root; the sandbox must be running or paused. An
// exposure is recorded and lasts until unexposed or the sandbox is
// removed: every new machine (a rollback, a restore, a resume from disk,
// a daemon restart's adoption) exposes it again, on the same address if
// that is free. A failure's text is in s's err.
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
	ports := slices.Clone(s.ports)
	i := slices.IndexFunc(ports, func(e Exposure) bool { return e.Guest == uint16(p) })
	if f[0] == "unexpose" {
		if err := nm.Unexpose(uint16(p)); err != nil {
			return err
		}
		if i >= 0 {
			ports = slices.Delete(ports, i, i+1)
		}
	} else {
		addr, err := nm.Expose(uint16(p), s.owner.UID, "")
		if err != nil {
			return err
		}
		if i < 0 {
			ports = append(ports, Exposure{Guest: uint16(p)})
			i = len(ports) - 1
		}
		ports[i].Host = addr
	}
	return s.setPorts(f[0], ports)
}

// setPorts records ports as s's exposures. op held.
func (s *Sandbox) setPorts(verb string, ports []Exposure) error {
	if err := s.persist(verb, s.state, func(r *record) { r.Ports = ports }); err != nil {
		return err
	}
	s.mu.Lock()
	s.ports = ports
	s.mu.Unlock()
	return nil
}

// reexpose exposes s's recorded ports on its new machine's network nm,
// each on the address it had if that is free; what fails is logged and
// stays recorded (the next machine tries again). The addresses given
// are recorded by the caller's next write of the record. op held.
func (s *Sandbox) reexpose(nm Networked) {
	for i, e := range s.ports {
		addr, err := nm.Expose(e.Guest, s.owner.UID, e.Host)
		if err != nil {
			s.p.log.Warn("net/ports: not exposed again", "sandbox", s.id, "port", e.Guest, "err", err)
			continue
		}
		if addr != e.Host {
			s.mu.Lock()
			s.ports[i].Host = addr
			s.mu.Unlock()
		}
	}
}
