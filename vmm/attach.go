package vmm

import (
	"fmt"
	"sort"

	"sandfs/vmm/boot"
	"sandfs/vmm/bus"
	"sandfs/vmm/kvm"
)

// Attaching devices to a machine before Start: MMIO and port I/O ranges,
// virtio-mmio slots and lifecycle hooks, and the exit dispatch to them.

// VirtioSlot is one virtio-mmio window and its interrupt line.
type VirtioSlot struct {
	Base, Size uint64
	IRQ        uint32
}

// Hooks are a device's lifecycle callbacks, all optional. Pause and
// Resume bracket a paused machine (after the vCPUs stop, before they run);
// Save returns a JSON-encodable value stored under the device's name in a
// snapshot and Restore gets it back (before Start); Close runs when the
// machine ends.
type Hooks struct {
	Pause   func()
	Resume  func()
	Save    func() (any, error)
	Restore func(data []byte) error
	Close   func() error
}

type mmioRange struct {
	base, size uint64
	dev        bus.MMIODevice
}

type pioRange struct {
	port, n uint16
	dev     bus.PIODevice
}

type namedHooks struct {
	name string
	Hooks
}

// AddMMIO maps dev at guest-physical [base, base+size). Only before Start.
func (m *Machine) AddMMIO(base, size uint64, dev bus.MMIODevice) error {
	if m.started {
		return fmt.Errorf("add mmio %#x: machine already started", base)
	}
	if size == 0 || base+size < base {
		return fmt.Errorf("add mmio %#x: bad size %#x", base, size)
	}
	for _, r := range m.mmios {
		if base < r.base+r.size && r.base < base+size {
			return fmt.Errorf("add mmio %#x+%#x: overlaps %#x+%#x", base, size, r.base, r.size)
		}
	}
	if _, err := m.ram.Slice(base, 1); err == nil {
		return fmt.Errorf("add mmio %#x: inside guest RAM", base)
	}
	m.mmios = append(m.mmios, mmioRange{base, size, dev})
	sort.Slice(m.mmios, func(i, j int) bool { return m.mmios[i].base < m.mmios[j].base })
	return nil
}

// AddPIO maps dev at I/O ports [port, port+n). Only before Start.
func (m *Machine) AddPIO(port, n uint16, dev bus.PIODevice) error {
	if m.started {
		return fmt.Errorf("add pio %#x: machine already started", port)
	}
	if n == 0 || uint32(port)+uint32(n) > 0x10000 {
		return fmt.Errorf("add pio %#x: bad count %d", port, n)
	}
	for _, r := range m.pios {
		if uint32(port) < uint32(r.port)+uint32(r.n) && uint32(r.port) < uint32(port)+uint32(n) {
			return fmt.Errorf("add pio %#x+%d: overlaps %#x+%d", port, n, r.port, r.n)
		}
	}
	m.pios = append(m.pios, pioRange{port, n, dev})
	return nil
}

// AddVirtio allocates the next virtio-mmio slot (a 4 KiB window in the MMIO
// hole and the next free IRQ line from 5), asks attach for the device to put
// there, maps it and declares it on the kernel command line
// (virtio_mmio.device=4K@<base>:<irq>). Slots are handed out in call
// order, so a restore must add the same devices in the same order.
func (m *Machine) AddVirtio(attach func(VirtioSlot) (bus.MMIODevice, error)) (VirtioSlot, error) {
	i := m.nVirtio
	if i >= boot.VirtioMMIOSlots || boot.VirtioIRQBase+i > boot.IRQMax {
		return VirtioSlot{}, fmt.Errorf("add virtio: no free slot (%d in use)", i)
	}
	s := VirtioSlot{Base: boot.VirtioMMIOBase + uint64(i)*boot.VirtioMMIOSize,
		Size: boot.VirtioMMIOSize, IRQ: uint32(boot.VirtioIRQBase + i)}
	dev, err := attach(s)
	if err != nil {
		return VirtioSlot{}, fmt.Errorf("add virtio slot %d: %w", i, err)
	}
	if err := m.AddMMIO(s.Base, s.Size, dev); err != nil {
		return VirtioSlot{}, err
	}
	m.nVirtio++
	m.cmd.AddVirtioMMIO(s.Base, s.Size, s.IRQ)
	return s, nil
}

// AddHooks registers a device's lifecycle callbacks under name (unique; the
// key of its state in a snapshot).
func (m *Machine) AddHooks(name string, h Hooks) error {
	for _, o := range m.hooks {
		if o.name == name {
			return fmt.Errorf("add hooks: duplicate device %q", name)
		}
	}
	m.hooks = append(m.hooks, namedHooks{name, h})
	return nil
}

// pio dispatches a port I/O exit. Unclaimed ports read as all ones and
// ignore writes, as on a PC bus with nothing there.
func (m *Machine) pio(io kvm.IO) {
	for _, r := range m.pios {
		if io.Port >= r.port && io.Port-r.port < r.n {
			off := io.Port - r.port
			for i := 0; i+io.Size <= len(io.Data); i += io.Size {
				if io.Out {
					r.dev.WritePIO(off, io.Data[i:i+io.Size])
				} else {
					r.dev.ReadPIO(off, io.Data[i:i+io.Size])
				}
			}
			return
		}
	}
	if !io.Out {
		for i := range io.Data {
			io.Data[i] = 0xff
		}
	}
}

// mmio dispatches an MMIO exit; unclaimed addresses read as zero.
func (m *Machine) mmio(mm kvm.MMIO) {
	i := sort.Search(len(m.mmios), func(i int) bool { return m.mmios[i].base+m.mmios[i].size > mm.Addr })
	if i < len(m.mmios) && mm.Addr >= m.mmios[i].base {
		r := m.mmios[i]
		if mm.Write {
			r.dev.WriteMMIO(mm.Addr-r.base, mm.Data)
		} else {
			r.dev.ReadMMIO(mm.Addr-r.base, mm.Data)
		}
		return
	}
	if !mm.Write {
		clear(mm.Data)
	}
}
