package ctl

import (
	"context"
	"syscall"

	"sandfs/ctl/cred"
	"sandfs/ctl/msg"
)

// mayControl refuses (EPERM, as kill(2) does for another user's process)
// a request naming s by id on /ctl (kill, rm) from anyone but s's owner
// or a privileged caller: the same people who may write s's own ctl
// (mode 0644, owned by its owner).
func (s *Sandbox) mayControl(ctx context.Context, verb string) error {
	c := cred.Of(ctx)
	if c.Privileged() || c.UID == s.owner.UID {
		return nil
	}
	return Errorf(syscall.EPERM, "%s: sandbox %s belongs to uid %d", verb, msg.Cite(s.id), s.owner.UID)
}
