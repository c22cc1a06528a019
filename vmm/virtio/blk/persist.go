package blk

import (
	"fmt"

	"sandfs/vmm/virtio"
)

// State is the saved state of a virtio-blk device. The disk's own state
// lives in its files (COW's overlay and map); Save does not sync it: the
// caller syncs the Disk when the snapshot needs it durable.
type State struct {
	Transport virtio.State
	Capacity  int64 // bytes; the restored disk must match
	ReadOnly  bool
	ID        string
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State {
	return State{Transport: d.t.Save(), Capacity: d.disk.Size(), ReadOnly: d.cfg.ReadOnly, ID: d.cfg.ID}
}

// Restore loads s into a device freshly made with New over the same disk.
func (d *Device) Restore(s State) error {
	if s.Capacity != d.disk.Size() {
		return fmt.Errorf("blk restore: disk size %d, saved %d", d.disk.Size(), s.Capacity)
	}
	d.cfg.ReadOnly, d.cfg.ID = s.ReadOnly, s.ID
	return d.t.Restore(s.Transport)
}
