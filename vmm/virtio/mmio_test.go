package virtio_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/virtiotest"
)

// echo copies each chain's readable bytes into its writable buffers.
type echo struct {
	kick        virtio.Kick
	run         virtio.Runner
	activations atomic.Int32 // Activate calls
}

func (e *echo) ID() uint32                          { return 42 }
func (e *echo) Features() uint64                    { return 1 << 3 }
func (e *echo) QueueMax() []uint16                  { return []uint16{16} }
func (e *echo) ReadConfig(off uint64, data []byte)  { copy(data, []byte("ABCDEFGH")[off:]) }
func (e *echo) WriteConfig(off uint64, data []byte) {}
func (e *echo) Notify(int)                          { e.kick.Kick() }
func (e *echo) Reset()                              { e.run.Stop() }
func (e *echo) Activate(t *virtio.Transport) error {
	e.activations.Add(1)
	q := t.Queue(0)
	e.run.Go(func(stop <-chan struct{}) {
		t.Loop(stop, e.kick, func() bool {
			return t.Drain(q, func(c *virtio.Chain) uint32 {
				var b bytes.Buffer
				b.ReadFrom(c)
				c.Write(b.Bytes())
				return c.Written()
			})
		})
	})
	return nil
}

func setup(t *testing.T, opt virtiotest.Options) (*virtio.Transport, *virtiotest.Driver) {
	mem := virtiotest.NewMem(4 << 20)
	irq := virtiotest.NewIRQ()
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, mem, irq, 5)
	t.Cleanup(tr.Close)
	return tr, virtiotest.Init(t, tr, mem, irq, opt)
}

func TestRegisters(t *testing.T) {
	_, d := setup(t, virtiotest.Options{})
	if id := d.Reg32(0x008); id != 42 {
		t.Errorf("DeviceID = %d, want 42", id)
	}
	if d.Features&virtio.Bit(virtio.FVersion1) == 0 || d.Features&(1<<3) == 0 {
		t.Errorf("features = %#x, want VERSION_1 and bit 3", d.Features)
	}
	if got := string(d.Config(2, 4)); got != "CDEF" {
		t.Errorf("config[2:6] = %q", got)
	}
	d.SetReg32(0x030, 1)
	if m := d.Reg32(0x034); m != 0 {
		t.Errorf("QueueNumMax(1) = %d, want 0", m)
	}
	// Non-32-bit register access reads as zero.
	b := make([]byte, 2)
	d.Dev.ReadMMIO(0, b)
	if b[0] != 0 || b[1] != 0 {
		t.Errorf("16-bit read of MagicValue = %x, want 0", b)
	}
}

func TestFeaturesRefusedWithoutVersion1(t *testing.T) {
	mem := virtiotest.NewMem(1 << 20)
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, mem, nil, 5)
	d := &virtiotest.Driver{Dev: tr, Mem: mem}
	d.SetReg32(0x070, virtio.StatusAcknowledge|virtio.StatusDriver)
	d.SetReg32(0x024, 0)
	d.SetReg32(0x020, 1<<3)
	d.SetReg32(0x070, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)
	if s := d.Reg32(0x070); s&virtio.StatusFeaturesOK != 0 {
		t.Errorf("Status = %#x: FEATURES_OK accepted without VERSION_1", s)
	}
}

func TestEcho(t *testing.T) {
	for _, tc := range []struct {
		name     string
		indirect bool
		eventIdx bool
	}{{"direct", false, false}, {"indirect", true, false}, {"event_idx", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			opt := virtiotest.Options{}
			if tc.eventIdx {
				opt.Accept = func(o uint64) uint64 { return o }
			}
			_, d := setup(t, opt)
			d.Q[0].Indirect = tc.indirect
			for i := range 40 { // more than the queue size: descriptors are recycled
				msg := bytes.Repeat([]byte{byte(i)}, 100+i)
				edges := d.IRQ.Edges.Load()
				h := d.AddKick(0, virtiotest.R(msg[:50]), virtiotest.R(msg[50:]), virtiotest.W(60), virtiotest.W(200))
				u := d.MustWait(0)
				if u.ID != h || int(u.Len) != len(msg) || !bytes.Equal(u.Out, msg) {
					t.Fatalf("round %d: used id=%d len=%d, want id=%d len=%d", i, u.ID, u.Len, h, len(msg))
				}
				for d.IRQ.Edges.Load() == edges {
					time.Sleep(time.Millisecond)
				}
				if s := d.Ack(); s&virtio.IntUsedBuffer == 0 {
					t.Fatalf("InterruptStatus = %#x", s)
				}
				for i := 0; d.IRQ.Level(5); i++ {
					if i > 1000 {
						t.Fatalf("line left high")
					}
					time.Sleep(time.Millisecond)
				}
				if tc.eventIdx {
					// The device sets avail_event after its
					// notification (DrainSignal), so it may come
					// a moment after the interrupt.
					ev := d.AvailEvent(0)
					for end := time.Now().Add(5 * time.Second); ev != uint16(i+1) && time.Now().Before(end); ev = d.AvailEvent(0) {
						time.Sleep(time.Millisecond)
					}
					if ev != uint16(i+1) {
						t.Fatalf("avail_event = %d, want %d", ev, i+1)
					}
				}
			}
		})
	}
}

func TestBadChainNeedsReset(t *testing.T) {
	_, d := setup(t, virtiotest.Options{})
	q := d.Q[0]
	// A two-descriptor loop: 0 → 1 → 0.
	for i, next := range []uint16{1, 0} {
		e := d.Mem.B[q.Desc+16*uint64(i):]
		binary.LittleEndian.PutUint64(e, 0x1000)
		binary.LittleEndian.PutUint32(e[8:], 16)
		binary.LittleEndian.PutUint16(e[12:], 1)
		binary.LittleEndian.PutUint16(e[14:], next)
	}
	binary.LittleEndian.PutUint16(d.Mem.B[q.Avail+4:], 0)
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&d.Mem.B[q.Avail])), 1<<16) // avail.idx = 1
	d.Kick(0)
	deadline := time.Now().Add(5 * time.Second)
	for d.Reg32(0x070)&virtio.StatusDeviceNeedsReset == 0 {
		if time.Now().After(deadline) {
			t.Fatal("looping chain did not set DEVICE_NEEDS_RESET")
		}
		time.Sleep(time.Millisecond)
	}
	if s := d.Ack(); s&virtio.IntConfigChange == 0 {
		t.Errorf("InterruptStatus = %#x, want config change", s)
	}
	// Reset clears it; the device works again after re-initialization.
	d2 := virtiotest.Init(t, d.Dev, d.Mem, d.IRQ, virtiotest.Options{})
	h := d2.AddKick(0, virtiotest.R([]byte("hi")), virtiotest.W(8))
	if u := d2.MustWait(0); u.ID != h || string(u.Out) != "hi" {
		t.Errorf("after reset: %+v", u)
	}
}

func TestResetClearsQueues(t *testing.T) {
	_, d := setup(t, virtiotest.Options{})
	d.SetReg32(0x070, 0)
	d.SetReg32(0x030, 0)
	if r := d.Reg32(0x044); r != 0 {
		t.Errorf("QueueReady after reset = %d", r)
	}
	if s := d.Reg32(0x070); s != 0 {
		t.Errorf("Status after reset = %#x", s)
	}
}

func TestSaveRestore(t *testing.T) {
	tr, d := setup(t, virtiotest.Options{})
	d.AddKick(0, virtiotest.R([]byte("one")), virtiotest.W(8))
	d.MustWait(0)
	tr.Pause()
	// Queued while paused (the vCPU would be stopped; this is the chain a
	// snapshot catches in flight, never kicked).
	h := d.Add(0, virtiotest.R([]byte("two")), virtiotest.W(8))
	s := tr.Save()
	tr.Close()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var s2 virtio.State
	if err := json.Unmarshal(b, &s2); err != nil {
		t.Fatal(err)
	}
	tr2 := virtio.NewTransport(&echo{kick: virtio.NewKick()}, d.Mem, d.IRQ, 5)
	t.Cleanup(tr2.Close)
	if err := tr2.Restore(s2); err != nil {
		t.Fatal(err)
	}
	d.Dev = tr2
	if u := d.MustWait(0); u.ID != h || string(u.Out) != "two" {
		t.Fatalf("restored device returned %+v, want head %d \"two\"", u, h)
	}
	h = d.AddKick(0, virtiotest.R([]byte("three")), virtiotest.W(8))
	if u := d.MustWait(0); u.ID != h || string(u.Out) != "three" {
		t.Fatalf("after restore: %+v", u)
	}
	if s3 := tr2.Save(); s3.Queues[0].NextUsed != 3 {
		t.Errorf("NextUsed = %d, want 3", s3.Queues[0].NextUsed)
	}
}

func TestCloseWhilePaused(t *testing.T) {
	tr, d := setup(t, virtiotest.Options{})
	tr.Pause()
	d.AddKick(0, virtiotest.R([]byte("x")), virtiotest.W(8))
	done := make(chan struct{})
	go func() { tr.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a paused transport")
	}
	tr.Resume() // harmless after Close
	time.Sleep(20 * time.Millisecond)
	if u, ok := d.Poll(0); ok {
		t.Errorf("device closed while paused still served a chain: %+v", u)
	}
}

// dirtyMem records MarkDirty calls.
type dirtyMem struct {
	*virtiotest.Mem
	mu    sync.Mutex
	pages map[uint64]bool
}

func (m *dirtyMem) MarkDirty(gpa uint64, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := gpa >> 12; p <= (gpa+uint64(n)-1)>>12; p++ {
		m.pages[p] = true
	}
}

func TestDirtyLog(t *testing.T) {
	raw := virtiotest.NewMem(4 << 20)
	mem := &dirtyMem{Mem: raw, pages: map[uint64]bool{}}
	irq := virtiotest.NewIRQ()
	tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, mem, irq, 5)
	defer tr.Close()
	d := virtiotest.Init(t, tr, raw, irq, virtiotest.Options{})
	d.AddKick(0, virtiotest.R([]byte("dirty")), virtiotest.W(8))
	d.MustWait(0)
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if !mem.pages[d.Q[0].UsedAddr>>12] {
		t.Errorf("used ring page %#x not marked dirty", d.Q[0].UsedAddr)
	}
}
