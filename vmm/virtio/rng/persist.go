package rng

import "sandfs/vmm/virtio"

// State is the saved state of a virtio-rng device: only its transport.
type State struct {
	Transport virtio.State
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State { return State{Transport: d.t.Save()} }

// Restore loads s into a freshly created device, before the guest runs.
func (d *Device) Restore(s State) error { return d.t.Restore(s.Transport) }
