// Package i8042 is the smallest keyboard controller Linux needs to reboot:
// ports 0x60 (data) and 0x64 (status/command). Status reads 0 (no data, input
// buffer empty), so the kernel's kb_wait() in arch/x86/kernel/reboot.c
// returns at once instead of polling 65,536 times; the command 0xFE
// (pulse the CPU reset line) calls the reset function, which the VMM turns
// into a clean exit. With reboot=k on the kernel command line, reboot(2)
// and panic=-1 both end here.
package i8042

import (
	"sync"

	"sandfs/vmm/bus"
)

// Ports.
const (
	DataPort    = 0x60
	CommandPort = 0x64

	cmdReset = 0xfe
)

// Controller serves ports 0x60-0x64 (register it for 5 ports at 0x60;
// 0x61-0x63 read as 0 too).
type Controller struct {
	once  sync.Once
	reset func()
}

var _ bus.PIODevice = (*Controller)(nil)

// New returns a controller that calls reset (once) on a reset command.
func New(reset func()) *Controller { return &Controller{reset: reset} }

// ReadPIO implements bus.PIODevice.ReadPIO: everything reads 0.
func (c *Controller) ReadPIO(off uint16, data []byte) {
	clear(data)
}

// WritePIO implements bus.PIODevice.WritePIO.
func (c *Controller) WritePIO(off uint16, data []byte) {
	if off == CommandPort-DataPort && len(data) > 0 && data[0] == cmdReset && c.reset != nil {
		c.once.Do(c.reset)
	}
}
