package sbnet

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"sandfs/ctl/msg"
)

// TestGroupMember: a member's network has the host's route to its
// member address through its veth, and its namespace the prerouting
// chain that gives that address to the guest; a non-member has neither;
// Remove takes the route with the veth. An address outside GroupPool is
// refused.
func TestGroupMember(t *testing.T) {
	m, _ := newManager(t)
	member := MemberAddr(3, 7)
	if member.String() != "100.126.3.7" {
		t.Fatalf("MemberAddr(3, 7) = %s", member)
	}
	if g, n, ok := GroupOf(member); !ok || g != 3 || n != 7 {
		t.Errorf("GroupOf(%s) = %d, %d, %v", member, g, n, ok)
	}
	for _, a := range []string{"100.126.3.0", "100.126.3.255", "100.127.0.1", "10.0.0.1"} {
		if _, _, ok := GroupOf(netip.MustParseAddr(a)); ok {
			t.Errorf("GroupOf(%s) ok", a)
		}
	}
	if _, err := m.CreateMember("x.1", mustParse(t, ""), netip.MustParseAddr("100.127.0.9")); msg.Errno(err) != syscall.EINVAL {
		t.Errorf("CreateMember outside the pool: %v; want EINVAL", err)
	}
	a, err := m.CreateMember("a.1", mustParse(t, ""), member)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create("b.1", mustParse(t, ""))
	if err != nil {
		a.Remove()
		t.Fatal(err)
	}
	defer b.Remove()
	route := func() []netlink.Route {
		rs, err := m.host.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipnet(netip.PrefixFrom(member, 32))}, netlink.RT_FILTER_DST)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rs := route()
	hl, _ := m.host.LinkByName(a.HostLink())
	if len(rs) != 1 || hl == nil || rs[0].LinkIndex != hl.Attrs().Index || rs[0].Gw.String() != a.Transit().Next().String() {
		t.Errorf("host routes to %s: %v; want one via %s on %s", member, rs, a.Transit().Next(), a.HostLink())
	}
	if !hasChain(t, a.ns, "prerouting") || hasChain(t, b.ns, "prerouting") {
		t.Errorf("prerouting chain: member %v, non-member %v; want true, false", hasChain(t, a.ns, "prerouting"), hasChain(t, b.ns, "prerouting"))
	}
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if rs := route(); len(rs) != 0 {
		t.Errorf("host routes to %s after Remove: %v", member, rs)
	}
}

func hasChain(t *testing.T, ns netns.NsHandle, name string) bool {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if ch.Table.Name == natTable && ch.Name == name {
			return true
		}
	}
	return false
}
