package ctl

// The VMM runtime's networks: with VMMRuntime.Net set, every machine
// (a template's boot included, so that its snapshot has the device its
// restores get) has a virtio-net device on a tap in a network namespace
// of its own (package netpolicy/sbnet), made before its VMM starts and
// removed when the VMM ends. Its name, <sandbox id>.<random>, is the
// VMM config's label "net" (for logs); Reattach finds the network again
// through the adopted VMM's tap descriptor (sbnet.Manager.Open). A
// network outlives the daemon only while its VMM does (sbnet's doc):
// there is nothing to clean up at start-up.

import (
	"crypto/rand"
	"encoding/hex"
	"syscall"

	"sandfs/netpolicy"
	"sandfs/netpolicy/resolver"
	"sandfs/netpolicy/sbnet"
	"sandfs/vmm/vmmproc"
)

// labelNet is the VMM config's label naming its machine's network.
const labelNet = "net"

// Networked is implemented by a Machine with a network of its own
// (VMMRuntime with Net set). SetPolicy replaces its egress policy live
// (on error the old one stays in force); Policy is the one in force, nil
// when the machine has no network (then only the record changes).
type Networked interface {
	SetPolicy(p *netpolicy.Policy) error
	Policy() *netpolicy.Policy
	// SetAudit makes fn get the network's audit lines (sbnet's format).
	SetAudit(fn func(line string))
	// Expose makes guest TCP port p reachable on the host's loopback
	// (its address; prefer, if free, else any) for uid owner and root
	// only; Unexpose ends that; Ports lists them, one line each:
	// "<guest port> <host address>".
	Expose(p uint16, owner uint32, prefer string) (string, error)
	Unexpose(p uint16) error
	Ports() string
}

var _ Networked = (*vmmMachine)(nil)

// guestCmdline is the runtime's extra kernel arguments with, when
// machines have networks, the guest's network configuration (the same in
// every sandbox: a snapshot restores with it unchanged).
func (r *VMMRuntime) guestCmdline() string {
	if r.Net == nil {
		return r.Cmdline
	}
	return sbnet.GuestCmdline() + " " + r.Cmdline
}

// parsePolicy is the policy of text (Config.Net; "" is default deny).
func parsePolicy(text string) (*netpolicy.Policy, error) {
	return netpolicy.Parse([]byte(text))
}

// netUp makes the network of a machine of sandbox id with sc's policy
// and member address and gives it to cfg (its tap, device and label).
// The caller closes cfg.TapFD once the VMM started and removes the
// network if it did not.
func (r *VMMRuntime) netUp(id string, sc Config, cfg *vmmproc.Config) (*sbnet.Net, error) {
	if r.Net == nil {
		return nil, nil
	}
	p, err := parsePolicy(sc.Net)
	if err != nil {
		return nil, Errorf(Errno(err), "net: %s", errText(err))
	}
	member, err := memberAddr(sc.Member)
	if err != nil {
		return nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	name := id + "." + hex.EncodeToString(b[:])
	n, err := r.Net.CreateMember(name, p, member)
	if err != nil {
		return nil, Errorf(Errno(err), "new: network: %s", errText(err))
	}
	if err := r.startResolver(id, n); err != nil {
		r.netDown(n)
		return nil, Errorf(Errno(err), "new: network: %s", errText(err))
	}
	cfg.TapFD = n.TakeTap()
	cfg.Net = &vmmproc.NetConfig{}
	cfg.Labels[labelNet] = name
	return n, nil
}

// netDown removes network n (nil: none) and forgets it; a failure is
// logged (the next Sweep tries again).
func (r *VMMRuntime) netDown(n *sbnet.Net) {
	if n == nil {
		return
	}
	if err := n.Remove(); err != nil {
		r.Log.Error("net: remove", "net", n.Name, "err", err)
	}
}

// startResolver starts n's resolver (sbnet.Net.StartResolver) when the
// runtime has an upstream; its answers and refusals are logged.
func (r *VMMRuntime) startResolver(id string, n *sbnet.Net) error {
	if r.DNSUpstream == "" {
		return nil
	}
	return n.StartResolver(r.DNSUpstream, func(e resolver.Event) {
		r.Log.Info("dns", "sandbox", id, "name", e.Name, "type", e.Type, "verdict", e.Verdict, "addrs", e.Addrs, "err", e.Err)
	})
}

// watchNet removes n when process p ends, and returns the machine's
// Done: closed once p has ended and n is gone (a sandbox is reported
// dead with nothing of its network left).
func (r *VMMRuntime) watchNet(p *vmmproc.Process, n *sbnet.Net) <-chan struct{} {
	if n == nil {
		return p.Done()
	}
	done := make(chan struct{})
	go func() {
		<-p.Done()
		r.netDown(n)
		close(done)
	}()
	return done
}

// reattachNet finds an adopted machine's network again (through its
// tap) with policy text; a machine without one (started by a daemon
// without networks) has none.
func (r *VMMRuntime) reattachNet(p *vmmproc.Process, policy string) (*sbnet.Net, error) {
	cfg := p.Config()
	if r.Net == nil || cfg.Net == nil {
		return nil, nil
	}
	pol, err := parsePolicy(policy)
	if err != nil {
		return nil, Errorf(Errno(err), "net: %s", errText(err))
	}
	n, err := r.Net.Open(cfg.Labels[labelNet], p.Pid(), pol)
	if err != nil {
		return nil, Errorf(Errno(err), "net: %s", errText(err))
	}
	if err := r.startResolver(p.Config().ID, n); err != nil {
		r.Log.Error("net: adopted without its resolver", "net", n.Name, "err", err)
	}
	return n, nil
}

// Expose implements Networked.
func (m *vmmMachine) Expose(p uint16, owner uint32, prefer string) (string, error) {
	if m.net == nil {
		return "", Errorf(syscall.ENODEV, "expose: sandbox has no network")
	}
	return m.net.Expose(p, owner, prefer)
}

// Unexpose implements Networked.
func (m *vmmMachine) Unexpose(p uint16) error {
	if m.net == nil {
		return Errorf(syscall.ENODEV, "unexpose: sandbox has no network")
	}
	return m.net.Unexpose(p)
}

// Ports implements Networked.
func (m *vmmMachine) Ports() string {
	if m.net == nil {
		return ""
	}
	return m.net.Ports()
}

// SetAudit implements Networked.
func (m *vmmMachine) SetAudit(fn func(line string)) {
	if m.net != nil {
		m.net.SetAudit(fn)
	}
}

// SetPolicy implements Networked.
func (m *vmmMachine) SetPolicy(p *netpolicy.Policy) error {
	if m.net == nil {
		return Errorf(syscall.ENODEV, "net: sandbox has no network")
	}
	return m.net.SetPolicy(p)
}

// Policy implements Networked (nil: no network, or no more: the VMM
// has ended, e.g. paused to disk, and its network is gone with it).
func (m *vmmMachine) Policy() *netpolicy.Policy {
	select {
	case <-m.p.Done():
		return nil
	default:
	}
	if m.net == nil {
		return nil
	}
	return m.net.Policy()
}
