package virtio

import (
	"fmt"
)

// QueueState is the saved state of one virtqueue.
type QueueState struct {
	Max        uint16
	Size       uint16
	Ready      bool
	DescAddr   uint64
	DriverAddr uint64
	DeviceAddr uint64
	NextAvail  uint16
	NextUsed   uint16
}

// State is the saved state of a Transport: its registers and queues.
// Device state is saved by each device beside it.
type State struct {
	Status            uint32
	DeviceFeaturesSel uint32
	DriverFeaturesSel uint32
	DriverFeatures    uint64
	QueueSel          uint32
	InterruptStatus   uint32
	ConfigGeneration  uint32
	NeedsReset        bool
	Live              bool
	Queues            []QueueState
}

// Save returns the transport's state. Call it between Pause and Resume
// with the vCPUs stopped.
func (t *Transport) Save() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := State{
		Status:            t.status,
		DeviceFeaturesSel: t.devFeatSel,
		DriverFeaturesSel: t.drvFeatSel,
		DriverFeatures:    t.driverFeatures,
		QueueSel:          t.queueSel,
		InterruptStatus:   t.intStatus.Load(),
		ConfigGeneration:  t.configGen.Load(),
		NeedsReset:        t.needsReset.Load(),
		Live:              t.live.Load(),
	}
	for _, q := range t.queues {
		s.Queues = append(s.Queues, QueueState{
			Max: q.Max, Size: q.Size, Ready: q.Ready,
			DescAddr: q.DescAddr, DriverAddr: q.DriverAddr, DeviceAddr: q.DeviceAddr,
			NextAvail: q.NextAvail, NextUsed: q.NextUsed,
		})
	}
	return s
}

// Restore loads s into a fresh transport (whose device has already
// restored its own state) and, if the device was live, activates it,
// re-signals pending interrupts and kicks every queue so that work the
// driver queued before the save is seen.
func (t *Transport) Restore(s State) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live.Load() {
		return fmt.Errorf("virtio restore: device %d is already live", t.dev.ID())
	}
	if len(s.Queues) != len(t.queues) {
		return fmt.Errorf("virtio restore: %d queues saved, device %d has %d", len(s.Queues), t.dev.ID(), len(t.queues))
	}
	t.status, t.devFeatSel, t.drvFeatSel = s.Status, s.DeviceFeaturesSel, s.DriverFeaturesSel
	t.driverFeatures, t.queueSel = s.DriverFeatures, s.QueueSel
	t.configGen.Store(s.ConfigGeneration)
	t.intStatus.Store(s.InterruptStatus)
	t.needsReset.Store(s.NeedsReset)
	for i, qs := range s.Queues {
		if qs.Max != t.queues[i].Max {
			return fmt.Errorf("virtio restore: queue %d max %d, device has %d", i, qs.Max, t.queues[i].Max)
		}
		*t.queues[i] = Queue{
			Max: qs.Max, Size: qs.Size, Ready: qs.Ready,
			DescAddr: qs.DescAddr, DriverAddr: qs.DriverAddr, DeviceAddr: qs.DeviceAddr,
			NextAvail: qs.NextAvail, NextUsed: qs.NextUsed,
		}
	}
	if s.Live && !s.NeedsReset {
		if err := t.activate(); err != nil {
			return fmt.Errorf("virtio restore: device %d: %w", t.dev.ID(), err)
		}
		for i := range t.queues {
			t.dev.Notify(i)
		}
	}
	if s.InterruptStatus != 0 {
		t.pulse()
	}
	return nil
}
