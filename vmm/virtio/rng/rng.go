// Package rng is virtio-rng (virtio 1.x §5.4): every device-writable buffer
// the driver queues is filled from crypto/rand. The guest sees it as
// /dev/hwrng and mixes it into its pool, which also reseeds a restored or
// cloned guest.
package rng

import (
	"crypto/rand"
	"io"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

const queueSize = 256

// maxPerChain caps what one request gets, so a huge buffer cannot keep
// the device busy.
const maxPerChain = 64 << 10

// Device is a virtio-rng device.
type Device struct {
	t    *virtio.Transport
	kick virtio.Kick
	run  virtio.Runner
	src  io.Reader
}

var _ virtio.Device = (*Device)(nil)

// New returns a virtio-rng device whose interrupt is line.
func New(mem bus.Memory, irq bus.IRQ, line uint32) *Device {
	d := &Device{kick: virtio.NewKick(), src: rand.Reader}
	d.t = virtio.NewTransport(d, mem, irq, line)
	return d
}

// Transport is the device's virtio-mmio window (a bus.MMIODevice).
func (d *Device) Transport() *virtio.Transport { return d.t }

// ID implements virtio.Device.ID.
func (d *Device) ID() uint32 { return virtio.IDRNG }

// Features implements virtio.Device.Features (none are device-specific).
func (d *Device) Features() uint64 { return 0 }

// QueueMax implements virtio.Device.QueueMax: one request queue.
func (d *Device) QueueMax() []uint16 { return []uint16{queueSize} }

// ReadConfig implements virtio.Device.ReadConfig (no configuration space).
func (d *Device) ReadConfig(off uint64, data []byte) {}

// WriteConfig implements virtio.Device.WriteConfig.
func (d *Device) WriteConfig(off uint64, data []byte) {}

// Notify implements virtio.Device.Notify.
func (d *Device) Notify(int) { d.kick.Kick() }

// Activate implements virtio.Device.Activate.
func (d *Device) Activate(t *virtio.Transport) error {
	q := t.Queue(0)
	buf := make([]byte, maxPerChain)
	d.run.Go(func(stop <-chan struct{}) {
		t.Loop(stop, d.kick, func() bool {
			return t.Drain(q, func(c *virtio.Chain) uint32 {
				n := min(c.WritableLen(), maxPerChain)
				if _, err := io.ReadFull(d.src, buf[:n]); err != nil {
					return 0
				}
				c.Write(buf[:n])
				return c.Written()
			})
		})
	})
	return nil
}

// Reset implements virtio.Device.Reset.
func (d *Device) Reset() { d.run.Stop() }

// Close stops the device.
func (d *Device) Close() error {
	d.t.Close()
	return nil
}
