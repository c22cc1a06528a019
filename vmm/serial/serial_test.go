package serial

import (
	"bytes"
	"testing"
)

// fakeIRQ records the line's level changes.
type fakeIRQ struct{ levels []bool }

func (f *fakeIRQ) SetIRQ(line uint32, level bool) error {
	f.levels = append(f.levels, level)
	return nil
}

func rd(s *Serial, off uint16) uint8 {
	b := []byte{0}
	s.ReadPIO(off, b)
	return b[0]
}

func wr(s *Serial, off uint16, v uint8) { s.WritePIO(off, []byte{v}) }

func TestProbe(t *testing.T) {
	s := New(nil, 4, nil)
	// Scratch register.
	wr(s, regSCR, 0xa5)
	if got := rd(s, regSCR); got != 0xa5 {
		t.Errorf("SCR = %#x; want 0xa5", got)
	}
	// Loopback: MSR reflects MCR (8250_port.c autoconfig writes MCR 0x1a, wants MSR&0xf0 == 0x90).
	wr(s, regMCR, mcrLoop|0x0a)
	if got := rd(s, regMSR) & 0xf0; got != 0x90 {
		t.Errorf("loopback MSR = %#x; want 0x90", got)
	}
	wr(s, regMCR, 0)
	if got := rd(s, regMSR); got != 0xb0 {
		t.Errorf("MSR = %#x; want 0xb0", got)
	}
	// FIFO: IIR top bits set once FCR enables FIFOs (16550A).
	wr(s, regIIR, 0xc7)
	if got := rd(s, regIIR); got&0xc0 != 0xc0 {
		t.Errorf("IIR with FIFO = %#x; want 0xc0 bits", got)
	}
	// Divisor latch.
	wr(s, regLCR, lcrDLAB)
	wr(s, regData, 1)
	wr(s, regIER, 2)
	if rd(s, regData) != 1 || rd(s, regIER) != 2 {
		t.Errorf("divisor latch not kept")
	}
	wr(s, regLCR, 0x03)
	if got := rd(s, regIER); got != 0 {
		t.Errorf("IER after DLAB = %#x; want 0", got)
	}
	if got := rd(s, regLSR); got != lsrTHRE|lsrTEMT {
		t.Errorf("LSR = %#x", got)
	}
}

func TestTHREInterrupt(t *testing.T) {
	irq := &fakeIRQ{}
	var out bytes.Buffer
	s := New(irq, 4, &out)
	wr(s, regMCR, mcrOUT2|mcrDTR|mcrRTS)
	if len(irq.levels) != 0 {
		t.Fatalf("levels before IER = %v", irq.levels)
	}
	wr(s, regIER, ierTHRE) // enabling THRE with THR empty raises it at once
	if got := rd(s, regIIR) & 0x0f; got != iirTHRE {
		t.Errorf("IIR = %#x; want THRE", got)
	}
	if got := rd(s, regIIR) & 0x0f; got != iirNone {
		t.Errorf("IIR after ack = %#x; want none", got)
	}
	if want := []bool{true, false}; !equal(irq.levels, want) {
		t.Errorf("levels = %v; want %v", irq.levels, want)
	}
	for _, c := range []byte("hi\n") {
		wr(s, regData, c)
	}
	if want := []bool{true, false, true}; !equal(irq.levels, want) {
		t.Errorf("levels after 3 bytes = %v; want %v (one edge, not one per byte)", irq.levels, want)
	}
	wr(s, regIER, 0)
	if want := []bool{true, false, true, false}; !equal(irq.levels, want) {
		t.Errorf("levels after IER=0 = %v; want %v", irq.levels, want)
	}
	if out.String() != "hi\n" {
		t.Errorf("out = %q", out.String())
	}
	// Without OUT2 the line stays low.
	wr(s, regMCR, 0)
	wr(s, regIER, ierTHRE)
	if len(irq.levels) != 4 {
		t.Errorf("levels without OUT2 = %v", irq.levels)
	}
}

func TestOutputBuffering(t *testing.T) {
	var out bytes.Buffer
	s := New(nil, 4, &out)
	for _, c := range []byte("partial") {
		wr(s, regData, c)
	}
	if out.Len() != 0 {
		t.Errorf("partial line written early: %q", out.String())
	}
	s.Flush()
	if out.String() != "partial" {
		t.Errorf("after Flush = %q", out.String())
	}
}

func TestInputAndPersist(t *testing.T) {
	irq := &fakeIRQ{}
	s := New(irq, 4, nil)
	wr(s, regMCR, mcrOUT2)
	wr(s, regIER, ierRDA)
	s.Input([]byte("ab"))
	if got := rd(s, regIIR) & 0x0f; got != iirRDA {
		t.Errorf("IIR = %#x; want RDA", got)
	}
	st := s.Save()
	s2 := New(irq, 4, nil)
	s2.Restore(st)
	if rd(s2, regLSR)&lsrDR == 0 || rd(s2, regData) != 'a' || rd(s2, regData) != 'b' || rd(s2, regLSR)&lsrDR != 0 {
		t.Errorf("restored RX FIFO wrong")
	}
	if rd(s2, regIER) != ierRDA || rd(s2, regMCR) != mcrOUT2 {
		t.Errorf("restored registers wrong")
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
