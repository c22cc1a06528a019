package sbnet

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// natTable is the nft table (family ip) of the masquerade rules, both in
// each sandbox's namespace and in the host's.
const natTable = "sandfs-nat"

// ifname is an interface name as nft compares it (IFNAMSIZ, zero-padded).
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// natRules adds table natTable on the connection c, replacing what the
// table held: a postrouting (source NAT) chain holding post and, for
// each non-empty list, a prerouting (destination NAT) chain holding pre
// and input and forward chains holding the rules given (each rule
// ending in its verdict).
func natRules(c *nftables.Conn, post, pre, input, forward [][]expr.Any) error {
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable}
	c.AddTable(t) // creates, or keeps an existing one...
	c.DelTable(t) // ...which is then deleted with its chains,
	c.AddTable(t) // so the table holds exactly this:
	for _, fc := range []struct {
		name  string
		typ   nftables.ChainType
		hook  *nftables.ChainHook
		prio  *nftables.ChainPriority
		rules [][]expr.Any
	}{
		{"postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource, post},
		{"prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest, pre},
		{"input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter, input},
		{"forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter, forward},
	} {
		if len(fc.rules) == 0 {
			continue
		}
		ch := c.AddChain(&nftables.Chain{Name: fc.name, Table: t, Type: fc.typ, Hooknum: fc.hook, Priority: fc.prio})
		for _, r := range fc.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft table %s: %w", natTable, err)
	}
	return nil
}

// sandboxNAT masquerades what leaves sandbox namespace ns through its
// veth (up0): the guest's address becomes the veth's transit address.
// It also drops DNS (UDP and TCP port 53, DNS over TLS 853) that the
// guest sends to be forwarded anywhere: its only name server is the
// sandbox's resolver, on the gateway (whatever the policy allows). And
// it drops, to the gateway and beyond, whatever comes from the tap with
// a source other than the guest's: the namespace's own answers to a
// forged source (an echo reply, a reset, the resolver's reply) would
// otherwise leave through up0 unmasqueraded, past the policy and the
// host's drop of the transit pool. member is the sandbox's member
// address (invalid: in no group; group.go's memberNAT).
func sandboxNAT(ns netns.NsHandle, member netip.Addr) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	defer c.CloseLasting()
	spoofed := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(tapName)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}, // saddr
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: GuestAddr.Addr().AsSlice()},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
	drops := [][]expr.Any{spoofed}
	for _, d := range []struct {
		proto byte
		port  uint16
	}{{unix.IPPROTO_UDP, 53}, {unix.IPPROTO_TCP, 53}, {unix.IPPROTO_TCP, 853}, {unix.IPPROTO_UDP, 853}} {
		drops = append(drops, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(tapName)},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{d.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(d.port >> 8), byte(d.port)}},
			&expr.Verdict{Kind: expr.VerdictDrop},
		})
	}
	post, pre, fwd := memberNAT(member)
	post = append(post, rule(ifIs(expr.MetaKeyOIFNAME, upName, false), []expr.Any{&expr.Masq{}}))
	return natRules(c, post, pre, [][]expr.Any{spoofed}, append(drops, fwd...))
}

// hostNAT masquerades, in the host's namespace, what comes from the
// transit pool and goes anywhere but the pool: the host's uplink, in
// practice. Whatever a policy allows, it drops what comes from the pool
// for the host itself (input: the host's own addresses and services)
// and for another sandbox (forward, pool to pool), and what is not
// member to member traffic from or to GroupPool (group.go). It replaces the
// table each time (idempotent; every manager writes the same rules).
func hostNAT(ns netns.NsHandle) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	defer c.CloseLasting()
	pool := TransitPool.Masked()
	masq := rule(inPrefix(pool, saddrOff, expr.CmpOpEq), inPrefix(pool, daddrOff, expr.CmpOpNeq), []expr.Any{&expr.Masq{}})
	input, forward := hostGroupRules()
	input = append(input, rule(inPrefix(pool, saddrOff, expr.CmpOpEq), drop))
	forward = append(forward, rule(inPrefix(pool, saddrOff, expr.CmpOpEq), inPrefix(pool, daddrOff, expr.CmpOpEq), drop))
	return natRules(c, [][]expr.Any{masq}, nil, input, forward)
}

// netipMask is prefix p's IPv4 mask as bytes.
func netipMask(p netip.Prefix) []byte {
	m := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
