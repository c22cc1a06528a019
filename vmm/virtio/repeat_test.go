package virtio_test

import (
	"encoding/binary"
	"testing"
	"time"

	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/virtiotest"
)

const regInterruptAck = 0x064

func ack(tr *virtio.Transport, bits uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], bits)
	tr.WriteMMIO(regInterruptAck, b[:])
}

// waitEdges waits up to d for the line to have had n edges.
func waitEdges(irq *virtiotest.IRQ, n int64, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for irq.Edges.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return irq.Edges.Load()
}

// TestUnackedInterruptRepeats: an interrupt the driver does not ack is
// signalled again about each second, and no more once it is acked (a
// lost edge would otherwise stall the queue for good: the lab's restored
// guests that stopped taking interrupts).
func TestUnackedInterruptRepeats(t *testing.T) {
	t.Parallel()
	irq := virtiotest.NewIRQ()
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, virtiotest.NewMem(1<<20), irq, 5)
	defer tr.Close()
	tr.Interrupt(virtio.IntUsedBuffer)
	if n := waitEdges(irq, 3, 3500*time.Millisecond); n < 3 {
		t.Fatalf("%d edges 3.5 s after an unacked interrupt; want the first and 2 repeats", n)
	}
	ack(tr, virtio.IntUsedBuffer)
	n := irq.Edges.Load()
	time.Sleep(2500 * time.Millisecond)
	if m := irq.Edges.Load(); m != n {
		t.Errorf("%d edges after the ack; want none", m-n)
	}
	if irq.Level(5) {
		t.Errorf("line left high")
	}
}

// TestAckedInterruptDoesNotRepeat: a driver that acks each interrupt
// gets one edge each, and a close ends the watch.
func TestAckedInterruptDoesNotRepeat(t *testing.T) {
	t.Parallel()
	irq := virtiotest.NewIRQ()
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, virtiotest.NewMem(1<<20), irq, 5)
	tr.Interrupt(virtio.IntUsedBuffer)
	ack(tr, virtio.IntUsedBuffer)
	// Acked, then interrupted again and acked within the period: the
	// watch sees acks and status clear.
	tr.Interrupt(virtio.IntConfigChange)
	ack(tr, virtio.IntConfigChange)
	time.Sleep(2500 * time.Millisecond)
	if n := irq.Edges.Load(); n != 2 {
		t.Errorf("%d edges for 2 acked interrupts; want 2", n)
	}
	// Unacked but closed: nothing after Close.
	tr.Interrupt(virtio.IntUsedBuffer)
	tr.Close()
	n := irq.Edges.Load()
	time.Sleep(1500 * time.Millisecond)
	if m := irq.Edges.Load(); m != n {
		t.Errorf("%d edges after Close; want none", m-n)
	}
}

// TestPausedTransportDoesNotRepeat: while paused (a snapshot in
// progress) the unacked interrupt is not signalled; after Resume it is.
func TestPausedTransportDoesNotRepeat(t *testing.T) {
	t.Parallel()
	irq := virtiotest.NewIRQ()
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, virtiotest.NewMem(1<<20), irq, 5)
	defer tr.Close()
	tr.Interrupt(virtio.IntUsedBuffer)
	tr.Pause()
	time.Sleep(2500 * time.Millisecond)
	if n := irq.Edges.Load(); n != 1 {
		t.Errorf("%d edges while paused; want only the first", n)
	}
	tr.Resume()
	if n := waitEdges(irq, 2, 2500*time.Millisecond); n < 2 {
		t.Errorf("no repeat after Resume (%d edges)", n)
	}
}
