package sbnet

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
)

// Net is one sandbox's network (package doc), made by Manager.Create or
// found again by Manager.Open.
type Net struct {
	Name   string
	log    *slog.Logger
	ns     netns.NsHandle  // the namespace, -1 if not open
	h      *netlink.Handle // netlink in ns
	host   *netlink.Handle // netlink in the host's namespace (the Manager's)
	slot   int             // transit slot, -1 unknown
	member netip.Addr      // member address (group.go), invalid: in no group; unknown for Open's

	mu      sync.Mutex // guards the fields below
	tap     *os.File   // tap0, until TakeTap
	filter  *netpolicy.Filter
	policy  *netpolicy.Policy // in force (the sandbox's; the filter also has the learned addresses)
	learned map[netip.Addr]learned
	expire  *time.Timer    // the next expiry of learned
	dns     net.PacketConn // the resolver's socket, nil none
	dnsTCP  net.Listener   // the resolver's TCP listener, nil none
	auditFn func(line string)
	ports   []*exposed // guest ports exposed to the host (ports.go)
}

// TakeTap returns the open tap for the VMM (once; nil after): the caller
// owns it and closes its copy once the VMM has it.
func (n *Net) TakeTap() *os.File {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.tap
	n.tap = nil
	return t
}

// Policy is the policy in force.
func (n *Net) Policy() *netpolicy.Policy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.policy
}

// SetPolicy replaces the policy live and atomically
// (netpolicy.Filter.Set); on error the old one stays in force.
func (n *Net) SetPolicy(p *netpolicy.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.filter == nil {
		return msg.Errorf(syscall.ENODEV, "net: %s: no filter", n.Name)
	}
	old := n.policy
	n.policy = p
	n.pruneLocked(time.Now()) // names p no longer allows lose their addresses
	if err := n.applyLocked(); err != nil {
		n.policy = old
		return err
	}
	return nil
}

// Transit is the host-side transit address (the one the host's stack
// sees as the sandbox's, after its namespace's NAT); invalid if unknown.
func (n *Net) Transit() netip.Addr {
	if n.slot < 0 {
		return netip.Addr{}
	}
	h, _ := slotAddrs(n.slot)
	return h
}

// HostLink is the name of the host side of the veth ("" if unknown).
func (n *Net) HostLink() string {
	if n.slot < 0 {
		return ""
	}
	return hostPrefix + strconv.Itoa(n.slot)
}

// Counters are the filter's packet counters (netpolicy.Counter).
func (n *Net) Counters() ([]uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.filter == nil {
		return nil, msg.Errorf(syscall.ENODEV, "net: %s: no filter", n.Name)
	}
	return n.filter.Counters()
}

// up gives link name in n's namespace address a and sets it up.
func (n *Net) up(name string, a netip.Prefix) (netlink.Link, error) {
	l, err := n.h.LinkByName(name)
	if err == nil {
		err = n.h.AddrAdd(l, &netlink.Addr{IPNet: ipnet(a)})
	}
	if err == nil {
		err = n.h.LinkSetUp(l)
	}
	if err == nil {
		var lo netlink.Link
		if lo, err = n.h.LinkByName("lo"); err == nil {
			err = n.h.LinkSetUp(lo)
		}
	}
	if err != nil {
		return nil, msg.Errorf(syscall.EIO, "net: %s: %s: %v", n.Name, name, err)
	}
	return l, nil
}

// transitSlot reads the slot from up0's address.
func (n *Net) transitSlot() (int, error) {
	l, err := n.h.LinkByName(upName)
	if err != nil {
		return -1, err
	}
	addrs, err := n.h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return -1, err
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && TransitPool.Contains(ip) {
			return slotOf(ip), nil
		}
	}
	return -1, errors.New("no transit address")
}

// Release lets go of n without removing anything: the daemon exits and
// its sandboxes run on; the filter stays attached with the policy in
// force (netpolicy.Filter.Release) and Open finds n again.
func (n *Net) Release() error {
	n.mu.Lock()
	var err error
	if n.filter != nil {
		err = n.filter.Release()
		n.filter = nil
	}
	n.mu.Unlock()
	n.close()
	return err
}

// Remove removes n: the filter (the totals of the connections it still
// tracks become audit lines first), the host side of the veth (its peer
// goes with it), and this process's hold on the namespace (which ends
// with the last descriptor of its tap, the VMM's). Parts that are gone
// already are not an error.
func (n *Net) Remove() error {
	var errs []error
	var flows []netpolicy.Flow
	n.mu.Lock()
	if n.filter != nil {
		flows, _ = n.filter.EndedFlows(flowIdle, true)
		errs = append(errs, n.filter.Close())
		n.filter = nil
	}
	n.mu.Unlock()
	n.flowLines(flows)
	if l := n.HostLink(); l != "" {
		if hl, err := n.host.LinkByName(l); err == nil {
			if err := n.host.LinkDel(hl); err != nil && !errors.Is(err, syscall.ENODEV) {
				errs = append(errs, msg.Errorf(syscall.EIO, "net: %s: delete %s: %v", n.Name, l, err))
			}
		}
	}
	n.close()
	return errors.Join(errs...)
}

// close closes n's descriptors (tap, resolver, handle, namespace).
func (n *Net) close() {
	n.mu.Lock()
	if n.tap != nil {
		n.tap.Close()
		n.tap = nil
	}
	if n.dns != nil {
		n.dns.Close()
		n.dns = nil
	}
	if n.dnsTCP != nil {
		n.dnsTCP.Close()
		n.dnsTCP = nil
	}
	if n.expire != nil {
		n.expire.Stop()
		n.expire = nil
	}
	n.closePortsLocked()
	n.mu.Unlock()
	if n.h != nil {
		n.h.Close()
		n.h = nil
	}
	if n.ns.IsOpen() {
		n.ns.Close()
		n.ns = netns.None()
	}
}
