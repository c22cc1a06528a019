package sbnet

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
	"sandfs/netpolicy"
	"sandfs/netpolicy/spares"
	vnet "sandfs/vmm/virtio/net"
)

// The addresses every sandbox uses (docs/network.md).
var (
	// GuestAddr is the guest's address on its eth0, GatewayAddr the
	// sandbox namespace's on tap0: the guest's route and name server.
	GuestAddr   = netip.MustParsePrefix("169.254.68.6/30")
	GatewayAddr = netip.MustParsePrefix("169.254.68.5/30")
	// TransitPool holds each sandbox's /31 between its namespace and
	// the host's: slot n is 100.127.0.0 + 2n (host) and + 2n + 1.
	TransitPool = netip.MustParsePrefix("100.127.0.0/16")
)

// GuestCmdline is what the guest's kernel command line needs for
// sandfs-init to configure its network (guest.ParseCmdline): the same in
// every sandbox, so a snapshot restores with it unchanged.
func GuestCmdline() string {
	return fmt.Sprintf("sandfs.ip=%s sandfs.gw=%s sandfs.dns=%s", GuestAddr, GatewayAddr.Addr(), GatewayAddr.Addr())
}

// Interface names: tap0 and up0 in a sandbox's namespace, hostPrefix +
// slot in the host's.
const (
	tapName    = "tap0"
	upName     = "up0"
	hostPrefix = "sfn"
	maxSlots   = 1 << 15 // /31s in TransitPool
)

// Manager makes and removes sandbox networks (package doc).
type Manager struct {
	log    *slog.Logger
	hostNS netns.NsHandle     // the host's namespace (the daemon's, or a test's)
	host   *netlink.Handle    // netlink in hostNS
	mu     sync.Mutex         // serializes the choice of transit slots
	spares *netpolicy.Spares  // filters loaded ahead (KeepSpares); nil: each network loads its own
	nets   *spares.Pool[*Net] // networks made ahead (KeepSpares); nil: each is made when asked for
}

// NewManager prepares the host (ip_forward, the host's NAT table) and
// returns a manager whose host side is the namespace of the calling
// thread.
func NewManager(log *slog.Logger) (*Manager, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, msg.Errorf(syscall.EIO, "net: host namespace: %v", err)
	}
	m, err := NewManagerIn(ns, log)
	ns.Close()
	return m, err
}

// NewManagerIn is NewManager with the host side in namespace hostNS
// (tests use one of their own; the handle is duplicated).
func NewManagerIn(hostNS netns.NsHandle, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	fd, err := unix.FcntlInt(uintptr(hostNS), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, msg.Errorf(syscall.EIO, "net: host namespace: %v", err)
	}
	m := &Manager{log: log, hostNS: netns.NsHandle(fd)}
	if m.host, err = netlink.NewHandleAt(m.hostNS, unix.NETLINK_ROUTE); err != nil {
		m.Close()
		return nil, msg.Errorf(syscall.EIO, "net: host netlink: %v", err)
	}
	err = InNS(m.hostNS, func() error { return sysctlOn("/proc/sys/net/ipv4/ip_forward", "1") })
	if err == nil {
		err = hostNAT(m.hostNS)
	}
	if err != nil {
		m.Close()
		return nil, msg.Errorf(msg.Errno(err), "net: host: %v", err)
	}
	return m, nil
}

// KeepSpares keeps n networks made ahead (package spares), and n
// filters loaded ahead of the networks made when asked for (a member of
// a group, a burst that took every spare network): a new sandbox takes
// a spare network and only sets its policy, rather than wait for a
// namespace, its NAT tables (most of a network's making: RCU grace
// periods as netfilter hooks register) and the kernel's verifier of its
// filter. A spare network is made as Create makes one, with the
// default-deny policy, and nothing holds its tap until it is taken; its
// replacement is made at the daemon's priority (netpolicy/spares: a
// niced make holding m.mu stalled every new in a loaded lab).
// Call it before the first network is made.
func (m *Manager) KeepSpares(n int) error {
	s, err := netpolicy.NewSpares(n)
	if err != nil {
		return err
	}
	m.spares = s
	deny, err := netpolicy.Parse(nil)
	if err != nil {
		return err
	}
	// Not niced: a network's making holds m.mu (its transit slot),
	// which every network being made for a sandbox waits for.
	nets, err := spares.New(n, false, func() (*Net, error) { return m.build("spare", deny, netip.Addr{}) }, func(n *Net) {
		if err := n.Remove(); err != nil {
			m.log.Warn("net: remove a spare network", "err", err)
		}
	})
	if err != nil {
		s.Close()
		m.spares = nil
		return err
	}
	m.nets = nets
	return nil
}

// takeSpare is a spare network named name with policy p in force, made
// now if none is ready.
func (m *Manager) takeSpare(name string, p *netpolicy.Policy) (*Net, error) {
	n, err := m.nets.Take()
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.Name, n.policy = name, p
	err = n.applyLocked()
	n.mu.Unlock()
	if err != nil {
		n.Remove()
		return nil, err
	}
	return n, nil
}

// loadFilter is a loaded filter for a new network: a spare if any.
func (m *Manager) loadFilter() (*netpolicy.Filter, error) {
	if m.spares != nil {
		return m.spares.Take()
	}
	return netpolicy.Load()
}

// Close closes the manager's handles and frees its spare networks and
// filters; its networks stay.
func (m *Manager) Close() {
	if m.nets != nil {
		m.nets.Close()
	}
	if m.spares != nil {
		m.spares.Close()
	}
	if m.host != nil {
		m.host.Close()
	}
	m.hostNS.Close()
}

// Create makes network name (a label for errors and logs: its
// namespace, tap0 open in it, the veth and NAT) with filter policy p in
// force before the tap exists for anyone. The caller hands Net.TakeTap
// to the VMM and Removes the net when the machine ends.
func (m *Manager) Create(name string, p *netpolicy.Policy) (n *Net, err error) {
	return m.CreateMember(name, p, netip.Addr{})
}

// CreateMember is Create for a member of a group with member address
// member (GroupPool; group.go); invalid: in no group.
func (m *Manager) CreateMember(name string, p *netpolicy.Policy, member netip.Addr) (n *Net, err error) {
	if member.IsValid() {
		if _, _, ok := GroupOf(member); !ok {
			return nil, msg.Errorf(syscall.EINVAL, "net: %s: member address %s not in %s", name, member, GroupPool)
		}
	} else if m.nets != nil {
		return m.takeSpare(name, p)
	}
	return m.build(name, p, member)
}

// build makes network name as CreateMember says.
func (m *Manager) build(name string, p *netpolicy.Policy, member netip.Addr) (n *Net, err error) {
	n = &Net{Name: name, log: m.log, host: m.host, policy: p, slot: -1, member: member}
	n.ns, err = NewNS(func() error {
		tap, _, err := vnet.OpenTap(tapName)
		n.tap = tap
		if err == nil {
			err = sysctlOn("/proc/sys/net/ipv4/ip_forward", "1")
		}
		return err
	})
	if err != nil {
		n.close()
		return nil, msg.Errorf(syscall.EIO, "net: %s: %v", name, err)
	}
	defer func() {
		if err != nil {
			n.Remove()
			n = nil
		}
	}()
	if n.h, err = netlink.NewHandleAt(n.ns, unix.NETLINK_ROUTE); err != nil {
		return nil, msg.Errorf(syscall.EIO, "net: %s: netlink: %v", name, err)
	}
	tap, err := n.up(tapName, GatewayAddr)
	if err != nil {
		return nil, err
	}
	if n.filter, err = m.loadFilter(); err != nil {
		return nil, err
	}
	if err := n.filter.Set(effective(p, nil)); err != nil {
		return nil, err
	}
	if err := n.filter.Attach(n.h, tap.Attrs().Index); err != nil {
		return nil, err
	}
	go n.readEvents(n.filter)
	go n.readFlows(n.filter)
	if err := m.link(n); err != nil {
		return nil, err
	}
	if err := sandboxNAT(n.ns, member); err != nil {
		return nil, msg.Errorf(syscall.EIO, "net: %s: %v", name, err)
	}
	return n, nil
}

// link joins n's namespace to the host's with a veth on the first free
// transit slot.
func (m *Manager) link(n *Net) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	slot, err := freeSlot(m.host)
	if err != nil {
		return err
	}
	host, inner := slotAddrs(slot)
	n.slot = slot
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostPrefix + strconv.Itoa(slot)},
		PeerName:      upName,
		PeerNamespace: netlink.NsFd(int(n.ns)),
	}
	if err := m.host.LinkAdd(v); err != nil {
		return msg.Errorf(msg.Errno(err), "net: %s: veth %s: %v", n.Name, v.Name, err)
	}
	hl, err := m.host.LinkByName(v.Name)
	if err == nil {
		err = m.host.AddrAdd(hl, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(host, 31))})
	}
	if err == nil {
		err = m.host.LinkSetUp(hl)
	}
	if err != nil {
		return msg.Errorf(syscall.EIO, "net: %s: host side %s: %v", n.Name, v.Name, err)
	}
	up, err := n.up(upName, netip.PrefixFrom(inner, 31))
	if err != nil {
		return err
	}
	gw := &netlink.Route{LinkIndex: up.Attrs().Index, Gw: host.AsSlice(), Dst: nil}
	if err := n.h.RouteAdd(gw); err != nil {
		return msg.Errorf(syscall.EIO, "net: %s: default route: %v", n.Name, err)
	}
	if n.member.IsValid() {
		// The host reaches the member address through this veth; the
		// route goes with the link.
		r := &netlink.Route{LinkIndex: hl.Attrs().Index, Gw: inner.AsSlice(), Dst: ipnet(netip.PrefixFrom(n.member, 32))}
		if err := m.host.RouteAdd(r); err != nil {
			return msg.Errorf(msg.Errno(err), "net: %s: route to member address %s: %v", n.Name, n.member, err)
		}
	}
	return nil
}

// freeSlot is the lowest transit slot no address of the host's uses.
func freeSlot(h *netlink.Handle) (int, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return 0, msg.Errorf(syscall.EIO, "net: host addresses: %v", err)
	}
	used := make(map[int]bool)
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if ok && TransitPool.Contains(ip) {
			b := ip.As4()
			used[(int(b[2])<<8|int(b[3]))/2] = true
		}
	}
	for s := 0; s < maxSlots; s++ {
		if !used[s] {
			return s, nil
		}
	}
	return 0, msg.Errorf(syscall.ENOSPC, "net: all %d transit slots in use", maxSlots)
}

// slotAddrs are slot's host-side and namespace-side transit addresses.
func slotAddrs(slot int) (host, inner netip.Addr) {
	b := TransitPool.Addr().As4()
	b[2], b[3] = byte(slot>>7), byte(slot<<1)
	host = netip.AddrFrom4(b)
	return host, host.Next()
}

// slotOf is the slot of a namespace-side transit address.
func slotOf(inner netip.Addr) int {
	b := inner.As4()
	return (int(b[2])<<8 | int(b[3])) / 2
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Open finds the network of a running VMM (pid) again after a daemon
// restart, through the tap it holds (TapNS), and
// puts a new filter holding p on the tap in place of the old one
// (netpolicy.Filter.Take). name is its label.
func (m *Manager) Open(name string, pid int, p *netpolicy.Policy) (*Net, error) {
	ns, err := TapNS(pid)
	if err != nil {
		return nil, msg.Errorf(msg.Errno(err), "net: %s: %v", name, err)
	}
	n := &Net{Name: name, log: m.log, ns: ns, host: m.host, policy: p, slot: -1}
	fail := func(err error) (*Net, error) {
		n.close()
		return nil, err
	}
	if n.h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE); err != nil {
		return fail(msg.Errorf(syscall.EIO, "net: %s: netlink: %v", name, err))
	}
	if s, err := n.transitSlot(); err == nil {
		n.slot = s
	}
	tap, err := n.h.LinkByName(tapName)
	if err != nil {
		return fail(msg.Errorf(syscall.ENOENT, "net: %s: no %s: %v", name, tapName, err))
	}
	if n.filter, err = m.loadFilter(); err != nil {
		return fail(err)
	}
	if err := n.filter.Set(effective(p, nil)); err != nil {
		return fail(err)
	}
	if err := n.filter.Take(n.h, tap.Attrs().Index); err != nil {
		return fail(err)
	}
	go n.readEvents(n.filter)
	go n.readFlows(n.filter)
	return n, nil
}
