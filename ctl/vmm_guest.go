package ctl

import (
	"context"
	"net"
	"syscall"

	"sandfs/vmm/virtio/vsock/hybrid"
)

var (
	_ GuestDialer   = (*vmmMachine)(nil)
	_ ConsolePather = (*vmmMachine)(nil)
)

// DialGuest implements GuestDialer: the hybrid vsock handshake on the
// VMM's vsock socket (hybrid.Dial).
func (m *vmmMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	if m.uds == "" {
		return nil, Errorf(syscall.ENOTSUP, "guest: machine has no vsock")
	}
	return hybrid.Dial(ctx, m.uds, port)
}

// ConsolePath implements ConsolePather.
func (m *vmmMachine) ConsolePath() string { return m.console }
