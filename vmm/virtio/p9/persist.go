package p9

import "sandfs/vmm/virtio"

// State is the saved state of a virtio-9p device. The session is not
// saved (its socket belongs to this process): the chains in flight are
// recorded, and the restored device answers them Rlerror(EIO), so no
// guest request waits for good; the guest mounts again to get a new
// session.
type State struct {
	Transport virtio.State
	Held      []Held `json:",omitempty"`
}

// Held is a chain in flight at the save: its head and its request's tag.
type Held struct {
	Head uint16
	Tag  uint16
}

// Save returns the device state (between Transport().Pause and Resume).
func (d *Device) Save() State {
	d.mu.Lock()
	var held []Held
	for tag, r := range d.pending {
		if r.c == nil {
			continue // a clunk answered early: its guest has its reply
		}
		held = append(held, Held{Head: r.c.Head, Tag: tag})
	}
	d.mu.Unlock()
	return State{Transport: d.t.Save(), Held: held}
}

// Restore loads s into a device freshly made with New, before the guest
// runs.
func (d *Device) Restore(s State) error {
	d.mu.Lock()
	d.held = s.Held
	d.mu.Unlock()
	return d.t.Restore(s.Transport)
}
