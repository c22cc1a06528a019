package ctl

// Named groups (docs/network.md "Groups"): new's group=<name> makes the
// sandbox a member; members reach each other at their member addresses
// (sbnet.GroupPool, 100.126.G.N) where both policies allow it. The plane
// chooses the address when the sandbox is made, keeps it in the record
// and gives it to every machine of the sandbox, so it never changes
// (unlike the transit address, which each machine gets anew): a policy
// can name it. G is the group's (the one its members have, else the
// lowest no group has), N the lowest free in it.

import (
	"net/netip"
	"syscall"

	"sandfs/ctl/msg"
	"sandfs/netpolicy/sbnet"
)

// The numbers of groups and of members in a group (sbnet.MemberAddr).
const (
	maxGroups  = 256
	maxMembers = 254
)

// joinGroupLocked gives cfg, when it names a group, a member address of
// its own in it (a clone's config carries its source's: replaced). p.mu
// held.
func (p *Plane) joinGroupLocked(cfg *Config, verb string) error {
	cfg.Member = ""
	if cfg.Group == "" {
		return nil
	}
	g := -1
	var usedG [maxGroups]bool
	var usedN [maxMembers + 1]bool
	for _, s := range p.boxes {
		s.mu.Lock()
		group, member := s.cfg.Group, s.cfg.Member
		s.mu.Unlock()
		a, err := netip.ParseAddr(member)
		if err != nil {
			continue
		}
		sg, sn, ok := sbnet.GroupOf(a)
		if !ok {
			continue
		}
		usedG[sg] = true
		if group == cfg.Group {
			g = sg
			usedN[sn] = true
		}
	}
	if g < 0 {
		for i := range maxGroups {
			if !usedG[i] {
				g = i
				break
			}
		}
		if g < 0 {
			return Errorf(syscall.ENOSPC, "%s: group %s: all %d groups in use", verb, msg.Cite(cfg.Group), maxGroups)
		}
	}
	for n := 1; n <= maxMembers; n++ {
		if !usedN[n] {
			cfg.Member = sbnet.MemberAddr(g, n).String()
			return nil
		}
	}
	return Errorf(syscall.ENOSPC, "%s: group %s has %d members already", verb, msg.Cite(cfg.Group), maxMembers)
}

// memberAddr is the member address of Config.Member ("": invalid, none).
func memberAddr(text string) (netip.Addr, error) {
	if text == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(text)
	if err == nil {
		if _, _, ok := sbnet.GroupOf(a); !ok {
			err = syscall.ERANGE
		}
	}
	if err != nil {
		return netip.Addr{}, Errorf(syscall.EINVAL, "net: member address %s: %v", msg.Cite(text), err)
	}
	return a, nil
}

// netGroup is net/addr's group fields: " group=<name> member=<address>",
// "" for a sandbox in no group.
func (s *Sandbox) netGroup() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Group == "" {
		return ""
	}
	return " group=" + s.cfg.Group + " member=" + s.cfg.Member
}

// validMember reports whether a record's member address is one ("" or
// in sbnet.GroupPool).
func validMember(text string) bool {
	_, err := memberAddr(text)
	return err == nil
}
