package ctl

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"

	"sandfs/ctl/msg"
)

// Owner is who a sandbox belongs to: the uid and gid of the request that
// created it, as Plan 9 gives a process's files to its user. It is fixed
// at creation and kept in the sandbox's record (a record written before
// owners existed has none and belongs to root, 0:0).
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Cred is who makes a request, as a transport vouches for it: a FUSE
// request's caller, a unix socket's peer (SO_PEERCRED), or the identity
// of a TCP token (root). A context carries it (WithCred); a context
// without one is the daemon itself (in-process callers, tests).
type Cred struct {
	UID, GID uint32
	// Groups returns the supplementary groups; it is called only when a
	// check depends on them (FUSE reads them from /proc). nil: none.
	Groups func() []uint32
}

// Owner is the owner a sandbox created by c gets.
func (c Cred) Owner() Owner { return Owner{UID: c.UID, GID: c.GID} }

// Privileged reports whether c may do anything: root, or the daemon's own
// user (who owns the tree; root in production).
func (c Cred) Privileged() bool { return c.UID == 0 || c.UID == daemon.UID }

// InGroup reports whether gid is c's group or one of its supplementary
// groups.
func (c Cred) InGroup(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	return c.Groups != nil && slices.Contains(c.Groups(), gid)
}

func (c Cred) String() string { return fmt.Sprintf("uid %d gid %d", c.UID, c.GID) }

// daemon is the daemon's own identity, the Cred of a context without one.
var daemon = Cred{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}

// Nobody is the identity of a client no transport vouches for.
var Nobody = Cred{UID: 65534, GID: 65534}

type credKey struct{}

// WithCred returns ctx carrying c: the requests made under it are c's.
func WithCred(ctx context.Context, c Cred) context.Context {
	return context.WithValue(ctx, credKey{}, c)
}

// CredOf returns the Cred ctx carries, or the daemon's own.
func CredOf(ctx context.Context) Cred {
	if c, ok := ctx.Value(credKey{}).(Cred); ok {
		return c
	}
	return daemon
}

// mayControl refuses (EPERM, as kill(2) does for another user's process)
// a request naming s by id on /ctl (kill, rm) from anyone but s's owner
// or a privileged caller: the same people who may write s's own ctl
// (mode 0644, owned by its owner).
func (s *Sandbox) mayControl(ctx context.Context, verb string) error {
	c := CredOf(ctx)
	if c.Privileged() || c.UID == s.owner.UID {
		return nil
	}
	return Errorf(syscall.EPERM, "%s: sandbox %s belongs to uid %d", verb, msg.Cite(s.id), s.owner.UID)
}
