package ctl

// A sandbox's egress policy (docs/network.md): Config.Net holds its
// canonical text, given by new's net= key, replaced live by a write of
// net/policy (SetNetPolicy), persisted in the record, and enforced by
// its machine's network (Networked) where the runtime gives it one.

import (
	"context"
	"strings"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
	"sandfs/netpolicy/sbnet"
)

// checkNet is the canonical policy text of a net= value: deny (the
// default), allow, or a policy in netpolicy's grammar whose lines are
// separated by ';' (a ctl message is one line), e.g.
//
//	net='allow 10.0.0.0/8; deny 10.1.0.0/16; allow example.com'
func checkNet(verb, value string) (string, error) {
	text := strings.ReplaceAll(value, ";", "\n")
	switch value {
	case "deny":
		text = "default deny"
	case "allow":
		text = "default allow"
	}
	p, err := netpolicy.Parse([]byte(text))
	if err != nil {
		return "", Errorf(Errno(err), "%s: net: %s", verb, errText(err))
	}
	return p.String(), nil
}

// NetPolicy is s's egress policy, canonical text (netpolicy.Policy.String).
func (s *Sandbox) NetPolicy() string {
	s.mu.Lock()
	text := s.cfg.Net
	s.mu.Unlock()
	if text == "" {
		return (&netpolicy.Policy{}).String()
	}
	return text
}

// SetNetPolicy replaces s's egress policy with text (netpolicy's
// grammar, the whole policy): parsed whole first (bad text changes
// nothing: EINVAL, E2BIG), then put in force by its machine's filter at
// once, atomically, and recorded. Allowed to s's owner and root, in any
// state but creating (EBUSY) and removed; a sandbox not running keeps it for its next
// machine. A failure's text is in s's err.
func (s *Sandbox) SetNetPolicy(ctx context.Context, text []byte) error {
	err := s.setNetPolicy(ctx, text)
	if err != nil {
		s.Fail("net/policy", err)
	}
	return err
}

func (s *Sandbox) setNetPolicy(ctx context.Context, text []byte) error {
	if err := s.mayControl(ctx, "policy"); err != nil {
		return err
	}
	p, err := netpolicy.Parse(text)
	if err != nil {
		return Errorf(Errno(err), "%s", errText(err))
	}
	canon := p.String()
	s.op.Lock()
	defer s.op.Unlock()
	switch s.state {
	case StateRemoved:
		return Errorf(syscall.ENOENT, "policy: no sandbox %s (removed)", msg.Cite(s.id))
	case StateCreating: // its machine's network is being made with the old one
		return Errorf(syscall.EBUSY, "policy: sandbox %s is creating; needs new, running, paused, stopping or dead", msg.Cite(s.id))
	case StateRunning, StatePaused, StateStopping:
		if nm, ok := s.m.(Networked); ok && nm.Policy() != nil {
			if err := nm.SetPolicy(p); err != nil {
				return Errorf(Errno(err), "policy: %s", errText(err))
			}
		}
	}
	if s.state != StateNew {
		if err := s.persist("policy", s.state, func(r *record) { r.Net = canon }); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.cfg.Net = canon
	s.mu.Unlock()
	return nil
}

// NetAddr is the text of net/addr: the guest's address, its gateway and
// name server, the same in every sandbox, and the host-side transit
// address its traffic leaves with, and for a member of a group the
// group and its member address (netgroup.go), e.g.
//
//	guest=169.254.68.6/30 gateway=169.254.68.5 dns=169.254.68.5 transit=100.127.0.2
//	guest=169.254.68.6/30 gateway=169.254.68.5 dns=169.254.68.5 transit=100.127.0.4 group=lab member=100.126.0.1
//
// A sandbox without a network (no runtime networks, or not running) says
// transit=-; one whose runtime has no networks at all says "none".
func (s *Sandbox) NetAddr() string {
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	var n *sbnet.Net
	if vm, ok := m.(*vmmMachine); ok {
		n = vm.net
	}
	if vr, ok := s.p.rt.(*VMMRuntime); !ok || vr.Net == nil {
		return "none"
	}
	transit := "-"
	if n != nil && n.Transit().IsValid() {
		transit = n.Transit().String()
	}
	return "guest=" + sbnet.GuestAddr.String() + " gateway=" + sbnet.GatewayAddr.Addr().String() +
		" dns=" + sbnet.GatewayAddr.Addr().String() + " transit=" + transit + s.netGroup()
}
