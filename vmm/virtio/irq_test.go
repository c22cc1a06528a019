package virtio_test

import (
	"sync"
	"testing"
	"time"

	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/virtiotest"
)

// gateIRQ is an edge-counting line (like KVM's IOAPIC for an edge pin: only
// a 0→1 transition is delivered) whose first raise stalls until released,
// so that another goroutine's interrupt overlaps a pulse in progress.
type gateIRQ struct {
	*virtiotest.IRQ
	once    sync.Once
	raised  chan struct{} // closed when the first raise is done
	release chan struct{} // the first raise returns once this is closed
}

func (g *gateIRQ) SetIRQ(line uint32, level bool) error {
	err := g.IRQ.SetIRQ(line, level)
	if level {
		g.once.Do(func() {
			close(g.raised)
			<-g.release
		})
	}
	return err
}

// TestConcurrentInterruptsEachGetAnEdge: two device goroutines (vsock's tx
// and rx) interrupting at once must give the driver two edges. Interleaved
// raise/raise/lower/lower pulses made one edge: the second interrupt's
// bits sat in InterruptStatus with no edge after the driver's read, and
// with EVENT_IDX no later push re-signalled (used_event never moved), so
// the guest stopped servicing the queue for good (the lab's vsock stall).
func TestConcurrentInterruptsEachGetAnEdge(t *testing.T) {
	irq := &gateIRQ{IRQ: virtiotest.NewIRQ(), raised: make(chan struct{}), release: make(chan struct{})}
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, virtiotest.NewMem(1<<20), irq, 5)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); tr.Interrupt(virtio.IntUsedBuffer) }()
	<-irq.raised // the first pulse is high and stalled
	go func() { defer wg.Done(); tr.Interrupt(virtio.IntConfigChange) }()
	time.Sleep(50 * time.Millisecond) // let the second pulse run into the first
	close(irq.release)
	wg.Wait()
	if n := irq.Edges.Load(); n != 2 {
		t.Errorf("%d interrupt edges for 2 overlapping interrupts, want 2", n)
	}
	if irq.Level(5) {
		t.Errorf("line left high")
	}
}
