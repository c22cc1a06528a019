// Package serial emulates the 16550A UART behind the guest's ttyS0 (COM1,
// ports 0x3f8-0x3ff, IRQ 4), modelled on the register set of the National
// Semiconductor PC16550D data sheet and on what Linux's 8250 driver probes
// (drivers/tty/serial/8250/8250_port.c: autoconfig, the loopback and
// THRE-interrupt tests).
//
// Transmission is instant: a byte written to THR goes straight to the
// output and THR is empty again, so the THRE interrupt is pending whenever
// it is enabled and not yet acknowledged by an IIR read. The interrupt line
// is driven as a level equal to "an interrupt is pending"; the IOAPIC pin is
// edge-triggered (ISA), so each rising level is one interrupt and the line
// costs one KVM_IRQ_LINE per change, not per byte.
//
// All methods are safe for concurrent use (vCPU goroutines and the host).
package serial

import (
	"io"
	"sync"

	"sandfs/vmm/bus"
)

// Register offsets from the base port.
const (
	regData = 0 // RBR (read) / THR (write); DLL when LCR.DLAB
	regIER  = 1 // DLM when LCR.DLAB
	regIIR  = 2 // IIR (read) / FCR (write)
	regLCR  = 3
	regMCR  = 4
	regLSR  = 5
	regMSR  = 6
	regSCR  = 7

	ierRDA  = 0x01 // received data available
	ierTHRE = 0x02 // transmitter holding register empty
	ierRLS  = 0x04
	ierMSI  = 0x08

	iirNone = 0x01
	iirTHRE = 0x02
	iirRDA  = 0x04
	iirFIFO = 0xc0 // FIFOs enabled (16550A)

	lcrDLAB = 0x80

	mcrDTR  = 0x01
	mcrRTS  = 0x02
	mcrOUT1 = 0x04
	mcrOUT2 = 0x08
	mcrLoop = 0x10

	lsrDR   = 0x01
	lsrTHRE = 0x20
	lsrTEMT = 0x40

	msrCTS = 0x10
	msrDSR = 0x20
	msrRI  = 0x40
	msrDCD = 0x80

	fcrEnable = 0x01
	fcrClrRX  = 0x02

	rxMax = 64
)

// Ports is the COM1 port range.
const (
	COM1Base = 0x3f8
	Ports    = 8
)

// Serial is one 16550A UART.
type Serial struct {
	irq  bus.IRQ
	line uint32

	mu sync.Mutex
	// mu protects all fields below.
	out         io.Writer
	buf         []byte // output not yet written: flushed at '\n' or when full
	ier, lcr    uint8
	mcr, scr    uint8
	dll, dlm    uint8
	fcr         uint8
	threPending bool // THRE interrupt pending (cleared by an IIR read or a THR write... re-set at once)
	rx          []byte
	level       bool // current level of the interrupt line
}

var _ bus.PIODevice = (*Serial)(nil)

// New returns a UART that writes what the guest sends to out and signals
// interrupts on line of irq.
func New(irq bus.IRQ, line uint32, out io.Writer) *Serial {
	return &Serial{irq: irq, line: line, out: out, dll: 0x0c, buf: make([]byte, 0, 512)}
}

// iir computes the interrupt identification, highest priority first.
func (s *Serial) iir() uint8 {
	id := uint8(iirNone)
	switch {
	case s.ier&ierRDA != 0 && len(s.rx) > 0:
		id = iirRDA
	case s.ier&ierTHRE != 0 && s.threPending:
		id = iirTHRE
	}
	if s.fcr&fcrEnable != 0 {
		id |= iirFIFO
	}
	return id
}

// update drives the interrupt line to "an interrupt is pending" (and
// OUT2, which gates the UART's interrupt onto the ISA bus on a PC).
func (s *Serial) update() {
	level := s.iir()&iirNone == 0 && s.mcr&mcrOUT2 != 0
	if level == s.level {
		return
	}
	s.level = level
	if s.irq != nil {
		_ = s.irq.SetIRQ(s.line, level) // nothing to do on failure: the VM is going away
	}
}

// ReadPIO implements bus.PIODevice.ReadPIO.
func (s *Serial) ReadPIO(off uint16, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v uint8
	switch off {
	case regData:
		if s.lcr&lcrDLAB != 0 {
			v = s.dll
		} else if len(s.rx) > 0 {
			v = s.rx[0]
			s.rx = s.rx[1:]
		}
	case regIER:
		if s.lcr&lcrDLAB != 0 {
			v = s.dlm
		} else {
			v = s.ier
		}
	case regIIR:
		v = s.iir()
		if v&0x0f == iirTHRE {
			s.threPending = false
		}
	case regLCR:
		v = s.lcr
	case regMCR:
		v = s.mcr
	case regLSR:
		v = lsrTHRE | lsrTEMT
		if len(s.rx) > 0 {
			v |= lsrDR
		}
	case regMSR:
		if s.mcr&mcrLoop != 0 {
			if s.mcr&mcrRTS != 0 {
				v |= msrCTS
			}
			if s.mcr&mcrDTR != 0 {
				v |= msrDSR
			}
			if s.mcr&mcrOUT1 != 0 {
				v |= msrRI
			}
			if s.mcr&mcrOUT2 != 0 {
				v |= msrDCD
			}
		} else {
			v = msrDCD | msrDSR | msrCTS
		}
	case regSCR:
		v = s.scr
	}
	for i := range data {
		data[i] = v
	}
	s.update()
}

// WritePIO implements bus.PIODevice.WritePIO.
func (s *Serial) WritePIO(off uint16, data []byte) {
	if len(data) == 0 {
		return
	}
	v := data[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	switch off {
	case regData:
		if s.lcr&lcrDLAB != 0 {
			s.dll = v
			break
		}
		if s.mcr&mcrLoop != 0 {
			if len(s.rx) < rxMax {
				s.rx = append(s.rx, v)
			}
		} else {
			s.emit(v)
		}
		s.threPending = true
	case regIER:
		if s.lcr&lcrDLAB != 0 {
			s.dlm = v
			break
		}
		old := s.ier
		s.ier = v & 0x0f
		if s.ier&ierTHRE != 0 && old&ierTHRE == 0 {
			s.threPending = true // THR is always empty
		}
	case regIIR: // FCR
		s.fcr = v & 0xc9
		if v&fcrClrRX != 0 {
			s.rx = s.rx[:0]
		}
	case regLCR:
		s.lcr = v
	case regMCR:
		s.mcr = v & 0x1f
	case regSCR:
		s.scr = v
	}
	s.update()
}

// emit queues one output byte; a full line (or buffer) is written out.
// Called with mu held.
func (s *Serial) emit(b byte) {
	s.buf = append(s.buf, b)
	if b == '\n' || len(s.buf) == cap(s.buf) {
		s.flushLocked()
	}
}

func (s *Serial) flushLocked() {
	if len(s.buf) > 0 && s.out != nil {
		_, _ = s.out.Write(s.buf) // a full console disk must not stop the guest
	}
	s.buf = s.buf[:0]
}

// Flush writes out a partial last line.
func (s *Serial) Flush() {
	s.mu.Lock()
	s.flushLocked()
	s.mu.Unlock()
}

// Input queues bytes for the guest to read (host → guest console), up to
// the 64-byte receive FIFO; the rest is dropped, as on a real UART.
func (s *Serial) Input(b []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(b), rxMax-len(s.rx))
	s.rx = append(s.rx, b[:n]...)
	s.update()
	return n
}
