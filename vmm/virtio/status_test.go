package virtio_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"sandfs/vmm/virtio"
	"sandfs/vmm/virtio/virtiotest"
)

// Registers the attacks below write (virtio 1.x §4.2.2).
const (
	rDriverFeatures    = 0x020
	rDriverFeaturesSel = 0x024
	rQueueSel          = 0x030
	rQueueNum          = 0x038
	rQueueReady        = 0x044
	rStatus            = 0x070
	rQueueDescLow      = 0x080
	rQueueDriverLow    = 0x090
	rQueueDeviceLow    = 0x0a0
)

const (
	statusFeatures = virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK
	statusLive     = statusFeatures | virtio.StatusDriverOK
)

// evilRings lays out a second, complete set of rings for queue 0 in fake
// RAM below the harness's allocations (which start at 1 MiB): four
// descriptors, one chain already available (a writable 64-byte buffer).
// A device that took these rings on would write a used element and
// used.idx = 1 into them. It returns the three ring addresses and a copy
// of the region as laid out, to compare with afterwards.
func evilRings(mem *virtiotest.Mem) (desc, avail, used uint64, region []byte) {
	const base, buf = 0x10000, 0x14000
	desc, avail, used = base, base+0x1000, base+0x2000
	binary.LittleEndian.PutUint64(mem.B[desc:], buf)
	binary.LittleEndian.PutUint32(mem.B[desc+8:], 64)
	binary.LittleEndian.PutUint16(mem.B[desc+12:], 2) // VIRTQ_DESC_F_WRITE
	binary.LittleEndian.PutUint16(mem.B[avail+2:], 1) // avail.idx
	binary.LittleEndian.PutUint16(mem.B[avail+4:], 0) // ring[0] = head 0
	return desc, avail, used, bytes.Clone(mem.B[base : buf+64])
}

// echoWorks runs n round trips on queue 0 and fails the test if the
// device does not answer each one on the driver's own rings.
func echoWorks(t *testing.T, d *virtiotest.Driver, n int) {
	t.Helper()
	for i := range n {
		msg := fmt.Appendf(nil, "round %d", i)
		h := d.AddKick(0, virtiotest.R(msg), virtiotest.W(32))
		u, ok := d.Wait(0, 5*time.Second)
		if !ok {
			t.Fatalf("round %d: no used buffer within 5s", i)
		}
		if u.ID != h || !bytes.Equal(u.Out, msg) {
			t.Fatalf("round %d: used id=%d %q, want id=%d %q", i, u.ID, u.Out, h, msg)
		}
	}
}

// TestReactivateWithoutReset is the attack of issue 10, item 5: a guest
// driver that, without writing 0 to Status, clears DRIVER_OK, rewrites the
// live queue's registers (QueueReady, QueueNum, ring addresses) or the
// features, and sets DRIVER_OK again. Before the reset state machine, that
// activated the device a second time: a second set of device goroutines
// over rings the first set was still using, racing on the queue state.
//
// Every step must be refused (§2.1.1: status bits only go up between
// resets; §4.2.2.2: queue registers are not written while the queue is
// live), Status and QueueReady must read back unchanged, the device must
// have been activated once, it must keep serving the driver's original
// rings, and the rings the attacker laid out must stay untouched.
func TestReactivateWithoutReset(t *testing.T) {
	moveQueue := func(d *virtiotest.Driver, desc, avail, used uint64) {
		d.SetReg32(rQueueSel, 0)
		d.SetReg32(rQueueReady, 0)
		d.SetReg32(rQueueNum, 4)
		d.SetReg32(rQueueDescLow, uint32(desc))
		d.SetReg32(rQueueDriverLow, uint32(avail))
		d.SetReg32(rQueueDeviceLow, uint32(used))
		d.SetReg32(rQueueReady, 1)
	}
	for _, tc := range []struct {
		name   string
		attack func(d *virtiotest.Driver, desc, avail, used uint64)
	}{
		{"clear DRIVER_OK then set it", func(d *virtiotest.Driver, _, _, _ uint64) {
			d.SetReg32(rStatus, statusFeatures)
			d.SetReg32(rStatus, statusLive)
		}},
		{"clear DRIVER_OK, move the queue, set DRIVER_OK", func(d *virtiotest.Driver, desc, avail, used uint64) {
			d.SetReg32(rStatus, statusFeatures)
			moveQueue(d, desc, avail, used)
			d.SetReg32(rStatus, statusLive)
		}},
		{"move the queue while live", func(d *virtiotest.Driver, desc, avail, used uint64) {
			moveQueue(d, desc, avail, used)
			d.SetReg32(rStatus, statusLive)
		}},
		{"clear FEATURES_OK, renegotiate, set DRIVER_OK", func(d *virtiotest.Driver, desc, avail, used uint64) {
			d.SetReg32(rStatus, virtio.StatusAcknowledge|virtio.StatusDriver)
			d.SetReg32(rDriverFeaturesSel, 0)
			d.SetReg32(rDriverFeatures, 0)
			d.SetReg32(rDriverFeaturesSel, 1)
			d.SetReg32(rDriverFeatures, 1) // VERSION_1 only
			d.SetReg32(rStatus, statusFeatures)
			moveQueue(d, desc, avail, used)
			d.SetReg32(rStatus, statusLive)
		}},
		{"status bits out of order", func(d *virtiotest.Driver, desc, avail, used uint64) {
			d.SetReg32(rStatus, virtio.StatusAcknowledge)
			moveQueue(d, desc, avail, used)
			d.SetReg32(rStatus, virtio.StatusAcknowledge|virtio.StatusDriverOK)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, d := setup(t, virtiotest.Options{})
			e := tr.Device().(*echo)
			echoWorks(t, d, 3)
			// Only the registers: the ring state (NextAvail, NextUsed) is
			// the device goroutine's, written while the test reads.
			q0 := tr.Queue(0)
			q, feats := virtio.Queue{Size: q0.Size, DescAddr: q0.DescAddr, DriverAddr: q0.DriverAddr, DeviceAddr: q0.DeviceAddr}, tr.Features()
			desc, avail, used, region := evilRings(d.Mem)

			tc.attack(d, desc, avail, used)

			if s := d.Reg32(rStatus); s != statusLive {
				t.Errorf("Status = %#x after the attack, want %#x (unchanged)", s, statusLive)
			}
			d.SetReg32(rQueueSel, 0)
			if r := d.Reg32(rQueueReady); r != 1 {
				t.Errorf("QueueReady = %d after the attack, want 1", r)
			}
			if n := e.activations.Load(); n != 1 {
				t.Errorf("device activated %d times, want 1", n)
			}
			now := tr.Queue(0)
			if now.Size != q.Size || now.DescAddr != q.DescAddr || now.DriverAddr != q.DriverAddr || now.DeviceAddr != q.DeviceAddr {
				t.Errorf("queue 0 moved to size=%d desc=%#x driver=%#x device=%#x, want size=%d desc=%#x driver=%#x device=%#x",
					now.Size, now.DescAddr, now.DriverAddr, now.DeviceAddr, q.Size, q.DescAddr, q.DriverAddr, q.DeviceAddr)
			}
			if f := tr.Features(); f != feats {
				t.Errorf("features = %#x after the attack, want %#x", f, feats)
			}
			// More round trips than the queue has entries: the device
			// still owns exactly the driver's rings.
			echoWorks(t, d, 2*int(q.Size)+1)
			time.Sleep(20 * time.Millisecond) // a second device goroutine would have run by now
			if got := d.Mem.B[desc : desc+uint64(len(region))]; !bytes.Equal(got, region) {
				t.Errorf("the attacker's rings were written by the device (used.idx = %d)", binary.LittleEndian.Uint16(d.Mem.B[used+2:]))
			}
		})
	}
}

// TestFailedStopsDevice: a driver that sets FAILED has given up on the
// device (§2.1); the device stops consuming buffers, and nothing but a
// reset brings it back: clearing FAILED or writing DRIVER_OK again is
// refused. After a reset the device initializes and works as new.
func TestFailedStopsDevice(t *testing.T) {
	tr, d := setup(t, virtiotest.Options{})
	e := tr.Device().(*echo)
	echoWorks(t, d, 1)
	d.SetReg32(rStatus, statusLive|virtio.StatusFailed)
	if s := d.Reg32(rStatus); s != statusLive|virtio.StatusFailed {
		t.Fatalf("Status = %#x after FAILED, want %#x", s, statusLive|virtio.StatusFailed)
	}
	d.SetReg32(rStatus, statusLive)     // clear FAILED: refused
	d.SetReg32(rStatus, statusFeatures) // clear DRIVER_OK: refused
	d.SetReg32(rStatus, statusLive|virtio.StatusFailed)
	if s := d.Reg32(rStatus); s != statusLive|virtio.StatusFailed {
		t.Errorf("Status = %#x after writes that clear bits, want %#x", s, statusLive|virtio.StatusFailed)
	}
	d.AddKick(0, virtiotest.R([]byte("ignored")), virtiotest.W(32))
	if u, ok := d.Wait(0, 100*time.Millisecond); ok {
		t.Errorf("a FAILED device served a chain: %+v", u)
	}
	if n := e.activations.Load(); n != 1 {
		t.Errorf("device activated %d times before the reset, want 1", n)
	}
	d2 := virtiotest.Init(t, tr, d.Mem, d.IRQ, virtiotest.Options{})
	echoWorks(t, d2, 2)
	if n := e.activations.Load(); n != 2 {
		t.Errorf("device activated %d times after one reset, want 2", n)
	}
}

// TestStatusOrder: between resets Status only gains bits, each after the
// one it depends on (§3.1.1: ACKNOWLEDGE, DRIVER, FEATURES_OK,
// DRIVER_OK); any other write leaves Status as it was, and 0 resets.
func TestStatusOrder(t *testing.T) {
	const (
		ack  = virtio.StatusAcknowledge
		drv  = virtio.StatusDriver
		fok  = virtio.StatusFeaturesOK
		dok  = virtio.StatusDriverOK
		fail = virtio.StatusFailed
	)
	for _, tc := range []struct {
		name   string
		writes []uint32
		want   uint32
	}{
		{"in order", []uint32{ack, ack | drv, ack | drv | fok}, ack | drv | fok},
		{"several bits at once", []uint32{ack | drv | fok}, ack | drv | fok},
		{"DRIVER before ACKNOWLEDGE", []uint32{drv}, 0},
		{"FEATURES_OK before DRIVER", []uint32{ack, ack | fok}, ack},
		{"DRIVER_OK before FEATURES_OK", []uint32{ack, ack | drv, ack | drv | dok}, ack | drv},
		{"clear a bit", []uint32{ack, ack | drv, ack}, ack | drv},
		{"unknown bit", []uint32{ack, ack | 0x10}, ack},
		{"NEEDS_RESET is the device's", []uint32{ack, ack | virtio.StatusDeviceNeedsReset}, ack},
		{"FAILED any time", []uint32{ack, fail}, ack | fail},
		{"nothing after FAILED", []uint32{ack, ack | fail, ack | drv | fail}, ack | fail},
		{"reset after FAILED", []uint32{ack, ack | fail, 0, ack}, ack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := virtio.NewTransport(&echo{kick: virtio.NewKick()}, virtiotest.NewMem(1<<20), nil, 5)
			t.Cleanup(tr.Close)
			d := &virtiotest.Driver{Dev: tr}
			d.SetReg32(rDriverFeaturesSel, 1)
			d.SetReg32(rDriverFeatures, 1) // VERSION_1, so FEATURES_OK is acceptable
			for _, w := range tc.writes {
				d.SetReg32(rStatus, w)
			}
			if s := d.Reg32(rStatus); s != tc.want {
				t.Errorf("writes %#x: Status = %#x, want %#x", tc.writes, s, tc.want)
			}
		})
	}
}
