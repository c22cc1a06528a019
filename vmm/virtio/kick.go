package virtio

// Kick is a one-slot wake-up signal from a vCPU (Notify) to a device
// goroutine; kicks coalesce and never block.
type Kick chan struct{}

// NewKick returns a Kick.
func NewKick() Kick { return make(Kick, 1) }

// Kick wakes the goroutine waiting on k.
func (k Kick) Kick() {
	select {
	case k <- struct{}{}:
	default:
	}
}
