// Package cred is who makes a request of the tree and who owns what it
// shows: Cred, the caller as a transport vouches for it (a FUSE request's
// caller, a unix socket's peer, a TCP token's identity), carried by a
// context (With, Of); and Owner, the uid and gid a node or a sandbox
// belongs to.
//
// It imports nothing from sandfs, so the node model (package fs), its
// transports and the guest agent use it without pulling in the control
// plane. It lives under ctl/ as ctl/msg does: the control plane fixes a
// sandbox's owner at creation (package ctl) and the tree checks access
// with it (fs.Chan).
package cred

import (
	"context"
	"fmt"
	"os"
	"slices"
)

// Owner is who a node or a sandbox belongs to: the uid and gid of the
// request that created it, as Plan 9 gives a process's files to its
// user. A sandbox's owner is fixed at creation and kept in its record (a
// record written before owners existed has none and belongs to root,
// 0:0).
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Cred is who makes a request, as a transport vouches for it: a FUSE
// request's caller, a unix socket's peer (SO_PEERCRED), or the identity
// of a TCP token (root). A context carries it (With); a context without
// one is the daemon itself (in-process callers, tests).
type Cred struct {
	UID, GID uint32
	// Groups returns the supplementary groups; it is called only when a
	// check depends on them (FUSE reads them from /proc). nil: none.
	Groups func() []uint32
}

// Owner is the owner of what c creates.
func (c Cred) Owner() Owner { return Owner{UID: c.UID, GID: c.GID} }

// Privileged reports whether c may do anything: root, or the process's
// own user (the daemon's, who owns the tree; root in production).
func (c Cred) Privileged() bool { return c.UID == 0 || c.UID == self.UID }

// InGroup reports whether gid is c's group or one of its supplementary
// groups.
func (c Cred) InGroup(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	return c.Groups != nil && slices.Contains(c.Groups(), gid)
}

func (c Cred) String() string { return fmt.Sprintf("uid %d gid %d", c.UID, c.GID) }

// self is the process's own identity (the daemon's), the Cred of a
// context without one.
var self = Cred{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}

// Self returns the process's own identity: the Cred of a context without
// one, and the owner of a tree's root.
func Self() Cred { return self }

// Nobody is the identity of a client no transport vouches for.
var Nobody = Cred{UID: 65534, GID: 65534}

type key struct{}

// With returns ctx carrying c: the requests made under it are c's.
func With(ctx context.Context, c Cred) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// Of returns the Cred ctx carries, or the process's own (Self).
func Of(ctx context.Context) Cred {
	if c, ok := ctx.Value(key{}).(Cred); ok {
		return c
	}
	return self
}

// Permits reports whether c may have access want (the bits of
// access(2): 4 read, 2 write, 1 search or execute) to a file of owner o
// with permission bits perm, as generic_permission (linux fs/namei.c)
// decides: the privileged may do anything; the owner gets the owner
// bits, a member of the file's group the group bits, anyone else the
// other bits.
func (c Cred) Permits(o Owner, perm uint32, want uint32) bool {
	if c.Privileged() {
		return true
	}
	perm &= 0o777
	switch {
	case c.UID == o.UID:
		perm >>= 6
	case c.InGroup(o.GID):
		perm >>= 3
	}
	return perm&want == want
}
