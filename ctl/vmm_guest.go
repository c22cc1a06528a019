package ctl

import (
	"context"
	"net"
	"os"
	"strconv"
	"syscall"

	"sandfs/vmm/uds"
	"sandfs/vmm/virtio/vsock/hybrid"
)

var (
	_ GuestDialer   = (*vmmMachine)(nil)
	_ ConsolePather = (*vmmMachine)(nil)
	_ GuestListener = (*vmmMachine)(nil)
)

// DialGuest implements GuestDialer: the hybrid vsock handshake on the
// VMM's vsock socket (hybrid.Dial).
func (m *vmmMachine) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	if m.uds == "" {
		return nil, Errorf(syscall.ENOTSUP, "guest: machine has no vsock")
	}
	return hybrid.Dial(ctx, m.uds, port)
}

// ListenGuest implements GuestListener: the hybrid vsock convention,
// the VMM connects a guest's connection to host port port to the unix
// socket "<uds>_<port>" (vmm/virtio/vsock/doc.go), which the VMM's uid
// may connect to.
func (m *vmmMachine) ListenGuest(port uint32) (net.Listener, error) {
	path := m.uds + "_" + strconv.FormatUint(uint64(port), 10)
	l, err := uds.Listen(path)
	if err != nil {
		return nil, err
	}
	if m.uid != 0 {
		if err := os.Chown(path, m.uid, m.uid); err != nil {
			l.Close()
			return nil, err
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// ConsolePath implements ConsolePather.
func (m *vmmMachine) ConsolePath() string { return m.console }
