package vsock

import (
	"time"

	"sandfs/vmm/virtio"
)

// State is the saved state of a virtio-vsock device. Connections are not
// saved: their host ends are unix sockets of this process. A restored
// device tells the guest with a TRANSPORT_RESET event, and the guest
// drops its connections (as with Firecracker).
type State struct {
	Transport virtio.State
	GuestCID  uint64
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State { return State{Transport: d.t.Save(), GuestCID: d.cid} }

// Restore loads s into a device freshly made with New; if the driver was
// live, the guest gets a TRANSPORT_RESET event.
func (d *Device) Restore(s State) error {
	d.mu.Lock()
	d.cid = s.GuestCID
	d.resetEvent = s.Transport.Live
	d.resetSince = time.Now()
	d.mu.Unlock()
	return d.t.Restore(s.Transport)
}
