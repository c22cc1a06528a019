package vsock

import "sandfs/vmm/virtio"

// State is the saved state of a virtio-vsock device. Connections are not
// saved: their host ends are unix sockets of this process. A restored
// device tells the guest with a TRANSPORT_RESET event, and the guest
// drops its connections (as with Firecracker).
type State struct {
	Transport virtio.State
	GuestCID  uint64
	// NextPort is the next host port for a host-initiated connection. A
	// restored device goes on from it: a new connection must not take the
	// port of one the guest still has until it handles the reset (its
	// REQUEST would reach that socket and be dropped). 0 in states saved
	// before it was recorded.
	NextPort uint32 `json:",omitempty"`
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State {
	d.mu.Lock()
	next := d.nextPort
	d.mu.Unlock()
	return State{Transport: d.t.Save(), GuestCID: d.cid, NextPort: next}
}

// Restore loads s into a device freshly made with New; if the driver was
// live, the guest gets a TRANSPORT_RESET event.
func (d *Device) Restore(s State) error {
	d.mu.Lock()
	d.cid = s.GuestCID
	d.resetEvent = s.Transport.Live
	if s.NextPort >= firstLocalPort {
		d.nextPort = s.NextPort
	} else if s.NextPort == 0 {
		// An older state: the guest's old ports are unknown, so start
		// past the few the daemon and the agent's clients used.
		d.nextPort = firstLocalPort + 1<<16
	}
	d.mu.Unlock()
	return d.t.Restore(s.Transport)
}
