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

// natRules adds table natTable with one postrouting chain holding rule
// on the connection c, replacing what the table held, and input and
// forward chains holding the rules given (each ending in its verdict).
func natRules(c *nftables.Conn, rule []expr.Any, input, forward [][]expr.Any) error {
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: natTable}
	c.AddTable(t) // creates, or keeps an existing one...
	c.DelTable(t) // ...which is then deleted with its chains,
	c.AddTable(t) // so the table holds exactly this:
	ch := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: rule})
	for _, fc := range []struct {
		name  string
		hook  *nftables.ChainHook
		rules [][]expr.Any
	}{{"input", nftables.ChainHookInput, input}, {"forward", nftables.ChainHookForward, forward}} {
		if len(fc.rules) == 0 {
			continue
		}
		ch := c.AddChain(&nftables.Chain{
			Name: fc.name, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: fc.hook, Priority: nftables.ChainPriorityFilter,
		})
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
// host's drop of the transit pool.
func sandboxNAT(ns netns.NsHandle) error {
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
	return natRules(c, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(upName)},
		&expr.Masq{},
	}, [][]expr.Any{spoofed}, drops)
}

// hostNAT masquerades, in the host's namespace, what comes from the
// transit pool and goes anywhere but the pool: the host's uplink, in
// practice. Whatever a policy allows, it drops what comes from the pool
// for the host itself (input: the host's own addresses and services)
// and for another sandbox (forward, pool to pool). It replaces the
// table each time (idempotent; every manager writes the same rules).
func hostNAT(ns netns.NsHandle) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	defer c.CloseLasting()
	pool := TransitPool.Masked()
	mask := netipMask(pool)
	net := pool.Addr().AsSlice()
	inPool := func(offset uint32, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
			&expr.Cmp{Op: op, Register: 1, Data: net},
		}
	}
	const saddr, daddr = 12, 16
	drop := &expr.Verdict{Kind: expr.VerdictDrop}
	masq := append(append(inPool(saddr, expr.CmpOpEq), inPool(daddr, expr.CmpOpNeq)...), &expr.Masq{})
	input := [][]expr.Any{append(inPool(saddr, expr.CmpOpEq), drop)}
	forward := [][]expr.Any{append(append(inPool(saddr, expr.CmpOpEq), inPool(daddr, expr.CmpOpEq)...), drop)}
	return natRules(c, masq, input, forward)
}

// netipMask is prefix p's IPv4 mask as bytes.
func netipMask(p netip.Prefix) []byte {
	m := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
