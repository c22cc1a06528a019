package boot

import (
	"fmt"
	"strings"
)

// BaseCmdline is what every sandfs guest needs: the serial console on
// ttyS0 (one UART, no probing of the others), no PCI (virtio-mmio only),
// reboot through the i8042 (the VMM turns it into a clean exit), no reboot
// delay after a panic, and no IO-APIC timer check (check_timer counts PIT
// ticks against a busy-wait; on a loaded or emulated host it can fail and
// panic the guest; Kata Containers passes it for the same reason).
const BaseCmdline = "console=ttyS0 8250.nr_uarts=1 pci=off reboot=k panic=-1 no_timer_check"

// Cmdline builds a kernel command line from space-separated parts, in order.
type Cmdline struct {
	parts []string
}

// Add appends arguments (already space-separated words).
func (c *Cmdline) Add(args ...string) {
	for _, a := range args {
		if a = strings.TrimSpace(a); a != "" {
			c.parts = append(c.parts, a)
		}
	}
}

// AddVirtioMMIO declares one virtio-mmio device, the
// CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES syntax of drivers/virtio/virtio_mmio.c:
// virtio_mmio.device=<size>@<baseaddr>:<irq>.
func (c *Cmdline) AddVirtioMMIO(base, size uint64, irq uint32) {
	c.parts = append(c.parts, VirtioMMIOArg(base, size, irq))
}

// VirtioMMIOArg is one virtio_mmio.device= argument.
func VirtioMMIOArg(base, size uint64, irq uint32) string {
	s := fmt.Sprintf("%#x", size)
	if size%1024 == 0 {
		s = fmt.Sprintf("%dK", size/1024)
	}
	return fmt.Sprintf("virtio_mmio.device=%s@%#x:%d", s, base, irq)
}

// String is the command line.
func (c *Cmdline) String() string { return strings.Join(c.parts, " ") }
