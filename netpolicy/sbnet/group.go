package sbnet

// Named groups (docs/network.md "Groups"): a sandbox that is a member of
// a group has a member address of its own, 100.126.G.N, G the group's,
// N the member's (both chosen by the daemon and kept in the sandbox's
// record, so the address is the same for every machine of the sandbox:
// a restore, a rollback, a resume, unlike its transit address). A guest
// reaches another member at that address; the traffic goes:
//
//	sender's namespace:  daddr in GroupPool: snat to the sender's member address
//	host's namespace:    a route per member address (via its veth);
//	                     forward GroupPool to GroupPool, to a veth, only
//	target's namespace:  from up0, saddr in GroupPool but not the target's
//	                     group's /24: drop; daddr its member address: dnat
//	                     to the guest
//
// and each side's filter judges the other's member address by its own
// policy (the sender's SYN, the target's SYN-ACK): both must allow.

import (
	"net/netip"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// GroupPool holds the member addresses: 100.126.G.N, G the group
// (0-255), N the member (1-254).
var GroupPool = netip.MustParsePrefix("100.126.0.0/16")

// MemberAddr is member n (1-254) of group g (0-255)'s address; invalid
// out of range.
func MemberAddr(g, n int) netip.Addr {
	if g < 0 || g > 255 || n < 1 || n > 254 {
		return netip.Addr{}
	}
	b := GroupPool.Addr().As4()
	b[2], b[3] = byte(g), byte(n)
	return netip.AddrFrom4(b)
}

// GroupOf is the group and member numbers of a member address (ok false
// outside GroupPool or out of range).
func GroupOf(a netip.Addr) (g, n int, ok bool) {
	if !a.Is4() || !GroupPool.Contains(a) {
		return 0, 0, false
	}
	b := a.As4()
	g, n = int(b[2]), int(b[3])
	return g, n, MemberAddr(g, n).IsValid()
}

// groupPrefix is member address a's group, a /24.
func groupPrefix(a netip.Addr) netip.Prefix {
	return netip.PrefixFrom(a, 24).Masked()
}

// The offsets of the IPv4 source and destination in the network header.
const saddrOff, daddrOff = 12, 16

// inPrefix is a rule's test that the IPv4 address at offset (saddrOff,
// daddrOff) is (op CmpOpEq) or is not (CmpOpNeq) in p.
func inPrefix(p netip.Prefix, offset uint32, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: netipMask(p), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

// ifIs is a rule's test that the packet's input (key MetaKeyIIFNAME) or
// output (MetaKeyOIFNAME) interface is name; prefix true compares only
// name's bytes (sfn matches every host link).
func ifIs(key expr.MetaKey, name string, prefix bool) []expr.Any {
	data := ifname(name)
	if prefix {
		data = []byte(name)
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

func rule(parts ...[]expr.Any) []expr.Any {
	var r []expr.Any
	for _, p := range parts {
		r = append(r, p...)
	}
	return r
}

var (
	accept = []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	drop   = []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
)

// memberNAT is the sandbox namespace's rules for member address member
// (invalid: not a member): postrouting, what goes to GroupPool leaves
// with the member address (ahead of the masquerade); prerouting, what
// comes for it goes to the guest; forward, what comes through up0 from
// GroupPool but not the member's group is dropped (all of it for a
// non-member).
func memberNAT(member netip.Addr) (post, pre, forward [][]expr.Any) {
	fromPool := rule(ifIs(expr.MetaKeyIIFNAME, upName, false), inPrefix(GroupPool, saddrOff, expr.CmpOpEq))
	if !member.IsValid() {
		return nil, nil, [][]expr.Any{rule(fromPool, drop)}
	}
	post = [][]expr.Any{rule(ifIs(expr.MetaKeyOIFNAME, upName, false), inPrefix(GroupPool, daddrOff, expr.CmpOpEq),
		[]expr.Any{
			&expr.Immediate{Register: 1, Data: member.AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
		})}
	pre = [][]expr.Any{rule(ifIs(expr.MetaKeyIIFNAME, upName, false), inPrefix(netip.PrefixFrom(member, 32), daddrOff, expr.CmpOpEq),
		[]expr.Any{
			&expr.Immediate{Register: 1, Data: GuestAddr.Addr().AsSlice()},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
		})}
	forward = [][]expr.Any{rule(fromPool, inPrefix(groupPrefix(member), saddrOff, expr.CmpOpNeq), drop)}
	return post, pre, forward
}

// hostGroupRules is the host's forward rules for member traffic, ahead of
// the drop of pool to pool: GroupPool to GroupPool through a host link
// (sfn*, where the member routes point) is accepted (the target's
// namespace checks the group); anything else from or to GroupPool is
// dropped (a member address never leaves for the uplink, and a
// non-member, masqueraded to its transit address, never reaches one).
// The input rule drops GroupPool to the host itself.
func hostGroupRules() (input, forward [][]expr.Any) {
	forward = [][]expr.Any{
		rule(inPrefix(GroupPool, saddrOff, expr.CmpOpEq), inPrefix(GroupPool, daddrOff, expr.CmpOpEq),
			ifIs(expr.MetaKeyOIFNAME, hostPrefix, true), accept),
		rule(inPrefix(GroupPool, saddrOff, expr.CmpOpEq), drop),
		rule(inPrefix(GroupPool, daddrOff, expr.CmpOpEq), drop),
	}
	input = [][]expr.Any{rule(inPrefix(GroupPool, saddrOff, expr.CmpOpEq), drop)}
	return input, forward
}
