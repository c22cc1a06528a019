package sbnet

import (
	"net"
	"net/netip"
	"syscall"
	"time"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
	"sandfs/netpolicy/resolver"
)

// maxLearned bounds the addresses a sandbox's answers may open at once
// (each is a rule in the filter's tries, which hold netpolicy's
// MaxRules): past it the oldest-expiring is dropped first.
const maxLearned = 1024

// learned is an address an answer for an allowed name opened, until
// expiry.
type learned struct {
	name   string
	expiry time.Time
}

// StartResolver serves the sandbox's DNS on the gateway's address, port
// 53, UDP and TCP, in its namespace (the only name server its guest can reach: the
// filter allows the gateway, and the namespace drops port 53 and 853
// forwarded anywhere else), forwarding allowed names to upstream
// (package resolver). It ends with Remove or Release.
func (n *Net) StartResolver(upstream string, log func(resolver.Event)) error {
	var pc net.PacketConn
	var ln net.Listener
	addr := net.JoinHostPort(GatewayAddr.Addr().String(), "53")
	err := InNS(n.ns, func() error {
		var err error
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp4", addr); err != nil {
			pc.Close()
		}
		return err
	})
	if err != nil {
		return msg.Errorf(syscall.EIO, "net: %s: resolver: %v", n.Name, err)
	}
	r := &resolver.Resolver{Policy: n.Policy, Upstream: upstream, Learn: n.learn, Log: func(e resolver.Event) {
		n.audit(dnsLine(e))
		if log != nil {
			log(e)
		}
	}}
	n.mu.Lock()
	n.dns, n.dnsTCP = pc, ln
	n.mu.Unlock()
	go r.Serve(pc)
	go r.ServeTCP(ln)
	return nil
}

// learn allows addrs, answered for name, for ttl (resolver.Learn).
func (n *Net) learn(name string, addrs []netip.Addr, ttl time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.filter == nil || !n.policy.AllowsName(name) {
		return // removed, or the name was dropped from the policy meanwhile
	}
	if n.learned == nil {
		n.learned = make(map[netip.Addr]learned)
	}
	exp := time.Now().Add(ttl)
	for _, a := range addrs {
		if l, ok := n.learned[a]; !ok || l.expiry.Before(exp) {
			n.learned[a] = learned{name: name, expiry: exp}
		}
	}
	n.pruneLocked(time.Now())
	for len(n.learned) > maxLearned {
		var first netip.Addr
		for a, l := range n.learned {
			if !first.IsValid() || l.expiry.Before(n.learned[first].expiry) {
				first = a
			}
		}
		delete(n.learned, first)
	}
	n.applyLocked()
}

// pruneLocked forgets the addresses expired at now and those whose name
// the policy no longer allows, and arms the timer for the next expiry.
// mu held.
func (n *Net) pruneLocked(now time.Time) {
	var next time.Time
	for a, l := range n.learned {
		if !l.expiry.After(now) || !n.policy.AllowsName(l.name) {
			delete(n.learned, a)
			continue
		}
		if next.IsZero() || l.expiry.Before(next) {
			next = l.expiry
		}
	}
	if n.expire != nil {
		n.expire.Stop()
		n.expire = nil
	}
	if !next.IsZero() {
		n.expire = time.AfterFunc(next.Sub(now), func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.filter != nil {
				n.pruneLocked(time.Now())
				n.applyLocked()
			}
		})
	}
}

// effective is what the filter enforces for policy p and the learned
// addresses: p's rules, an allow of the gateway (the resolver; nothing
// else listens in the namespace) and an allow of each learned address.
func effective(p *netpolicy.Policy, l map[netip.Addr]learned) *netpolicy.Policy {
	e := &netpolicy.Policy{Default: p.Default, Domains: p.Domains}
	e.Rules = append(e.Rules, p.Rules...)
	e.Rules = append(e.Rules, netpolicy.Rule{Verdict: netpolicy.Allow, Prefix: netip.PrefixFrom(GatewayAddr.Addr(), 32)})
	for a := range l {
		e.Rules = append(e.Rules, netpolicy.Rule{Verdict: netpolicy.Allow, Prefix: netip.PrefixFrom(a, a.BitLen())})
	}
	return e
}

// applyLocked puts the effective policy in force; a failure (a trie
// full) is logged by the caller's next Set and leaves the old one. mu
// held.
func (n *Net) applyLocked() error {
	return n.filter.Set(effective(n.policy, n.learned))
}
