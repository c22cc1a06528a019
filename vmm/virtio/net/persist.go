package net

import "sandfs/vmm/virtio"

// State is the saved state of a virtio-net device. A frame the RX
// goroutine had read from the tap but not yet delivered is not saved (the
// network may drop packets anyway).
type State struct {
	Transport virtio.State
	MAC       [6]byte
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State { return State{Transport: d.t.Save(), MAC: d.mac} }

// Restore loads s into a device freshly made with New. The MAC comes
// from s: a clone that needs its own identity sets it in s first.
func (d *Device) Restore(s State) error {
	d.mac = s.MAC
	return d.t.Restore(s.Transport)
}
