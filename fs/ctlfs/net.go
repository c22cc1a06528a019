package ctlfs

import (
	"bytes"
	"context"
	iofs "io/fs"

	sfs "sandfs/fs"

	"sandfs/ctl"
)

// netTable is a sandbox's network directory, /sandboxes/<id>/net/
// (docs/network.md), its owner's like the rest of the sandbox.
var netTable = sfs.Table[*ctl.Sandbox]{
	{Name: "policy", Mode: 0o600, New: netPolicyFile},
	{Name: "addr", Mode: 0o444, New: netAddrFile},
	{Name: "audit", Mode: 0o400, New: func(sb *ctl.Sandbox, m iofs.FileMode) sfs.Node { return &netAuditFile{sb: sb, mode: m} }},
	{Name: "ports", Mode: 0o600, New: netPortsFile},
}

func newNetDir(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	o := sb.Owner()
	return netTable.Dir(sb, mode, &o)
}

// netPolicyFile serves net/policy: a read gives the egress policy in
// package netpolicy's canonical text, e.g.
//
//	default deny
//	allow 10.0.0.0/8
//	allow example.com
//
// and a write (one write, the whole policy) replaces it live and
// atomically (ctl.Sandbox.SetNetPolicy); bad text changes nothing and
// its error (EINVAL, E2BIG) is in the sandbox's err.
func netPolicyFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.CtlFile{
		TextFile: sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
			b.WriteString(sb.NetPolicy())
			return nil
		}},
		Msg: sb.SetNetPolicy,
	}
}

// netAddrFile serves net/addr, one line (ctl.Sandbox.NetAddr), e.g.
//
//	guest=169.254.68.6/30 gateway=169.254.68.5 dns=169.254.68.5 transit=100.127.0.2
func netAddrFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(sb.NetAddr())
		b.WriteByte('\n')
		return nil
	}}
}

// netPortsFile serves net/ports: a read gives one line per guest TCP
// port exposed to the host (ctl.Sandbox.NetPorts), e.g.
//
//	8000 127.0.0.1:41234
//
// and a write is "expose <port>" or "unexpose <port>"
// (ctl.Sandbox.NetPortsCtl).
func netPortsFile(sb *ctl.Sandbox, mode iofs.FileMode) sfs.Node {
	return &sfs.CtlFile{
		TextFile: sfs.TextFile{Mode: mode, Gen: func(_ context.Context, b *bytes.Buffer) error {
			b.WriteString(sb.NetPorts())
			return nil
		}},
		Msg: sb.NetPortsCtl,
	}
}
