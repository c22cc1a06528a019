package virtio

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"sandfs/vmm/bus"
)

// MMIOSize is the size of one virtio-mmio window: registers at 0x000-0x0ff,
// device configuration space from 0x100.
const MMIOSize = 0x1000

// virtio-mmio register offsets (virtio 1.x §4.2.2, linux/virtio_mmio.h).
const (
	regMagicValue        = 0x000 // VIRTIO_MMIO_MAGIC_VALUE
	regVersion           = 0x004 // VIRTIO_MMIO_VERSION
	regDeviceID          = 0x008 // VIRTIO_MMIO_DEVICE_ID
	regVendorID          = 0x00c // VIRTIO_MMIO_VENDOR_ID
	regDeviceFeatures    = 0x010 // VIRTIO_MMIO_DEVICE_FEATURES
	regDeviceFeaturesSel = 0x014 // VIRTIO_MMIO_DEVICE_FEATURES_SEL
	regDriverFeatures    = 0x020 // VIRTIO_MMIO_DRIVER_FEATURES
	regDriverFeaturesSel = 0x024 // VIRTIO_MMIO_DRIVER_FEATURES_SEL
	regQueueSel          = 0x030 // VIRTIO_MMIO_QUEUE_SEL
	regQueueNumMax       = 0x034 // VIRTIO_MMIO_QUEUE_NUM_MAX
	regQueueNum          = 0x038 // VIRTIO_MMIO_QUEUE_NUM
	regQueueReady        = 0x044 // VIRTIO_MMIO_QUEUE_READY
	regQueueNotify       = 0x050 // VIRTIO_MMIO_QUEUE_NOTIFY
	regInterruptStatus   = 0x060 // VIRTIO_MMIO_INTERRUPT_STATUS
	regInterruptAck      = 0x064 // VIRTIO_MMIO_INTERRUPT_ACK
	regStatus            = 0x070 // VIRTIO_MMIO_STATUS
	regQueueDescLow      = 0x080 // VIRTIO_MMIO_QUEUE_DESC_LOW
	regQueueDescHigh     = 0x084
	regQueueDriverLow    = 0x090 // VIRTIO_MMIO_QUEUE_AVAIL_LOW
	regQueueDriverHigh   = 0x094
	regQueueDeviceLow    = 0x0a0 // VIRTIO_MMIO_QUEUE_USED_LOW
	regQueueDeviceHigh   = 0x0a4
	regShmLenLow         = 0x0b0 // VIRTIO_MMIO_SHM_LEN_LOW
	regShmLenHigh        = 0x0b4
	regShmBaseLow        = 0x0b8
	regShmBaseHigh       = 0x0bc
	regConfigGeneration  = 0x0fc // VIRTIO_MMIO_CONFIG_GENERATION
	regConfig            = 0x100 // VIRTIO_MMIO_CONFIG

	magicValue  = 0x74726976 // "virt"
	mmioVersion = 2
	vendorID    = 0x53464453 // "SDFS"
)

// Device is one virtio device type behind a Transport.
type Device interface {
	// ID is the virtio device ID (IDBlock, IDNet, ...).
	ID() uint32
	// Features are the device-specific feature bits offered. The
	// transport adds VERSION_1, INDIRECT_DESC and EVENT_IDX.
	Features() uint64
	// QueueMax gives the maximum size of each queue; its length is the
	// number of queues.
	QueueMax() []uint16
	// ReadConfig and WriteConfig access the device configuration space.
	ReadConfig(off uint64, data []byte)
	WriteConfig(off uint64, data []byte)
	// Activate starts the device when the driver sets DRIVER_OK (or on
	// restore of a live device): the queues are mapped and t.Features() is
	// the negotiated set. The device starts its goroutines here.
	Activate(t *Transport) error
	// Reset stops the device's goroutines (waiting for them) and returns it
	// to its initial state. Called when a live device is reset by the
	// driver, failed by it (FAILED) or closed; Activate may follow after
	// the next DRIVER_OK.
	Reset()
	// Notify is a queue notification from the driver, on a vCPU
	// goroutine. It must not block: kick the device goroutine.
	Notify(queue int)
}

// Transport is a virtio-mmio (version 2) device window; it implements
// bus.MMIODevice.
type Transport struct {
	dev  Device
	mem  bus.Memory
	irq  bus.IRQ
	line uint32

	mu             sync.Mutex // guards the fields below
	status         uint32
	devFeatSel     uint32
	drvFeatSel     uint32
	driverFeatures uint64
	queueSel       uint32
	queues         []*Queue

	configGen  atomic.Uint32
	live       atomic.Bool   // DRIVER_OK accepted and device activated
	features   atomic.Uint64 // negotiated features, valid while live
	intStatus  atomic.Uint32
	needsReset atomic.Bool
	pulses     atomic.Uint64 // interrupt edges sent (for the debug dump)
	pulseMu    sync.Mutex    // one raise/lower pair on the line at a time
	acks       atomic.Uint64 // InterruptACK writes
	repeat     repeater      // an unacknowledged interrupt signalled again (repeat.go)

	work    sync.RWMutex // pause gate: device batches hold it shared, Pause exclusive
	paused  atomic.Bool  // work is held by Pause
	closing atomic.Bool  // Close has started: Begin refuses
}

var _ bus.MMIODevice = (*Transport)(nil)

// NewTransport wraps dev in a virtio-mmio window whose interrupt is line.
func NewTransport(dev Device, mem bus.Memory, irq bus.IRQ, line uint32) *Transport {
	t := &Transport{dev: dev, mem: mem, irq: irq, line: line}
	for _, m := range dev.QueueMax() {
		t.queues = append(t.queues, &Queue{Max: m})
	}
	debugRegister(t)
	return t
}

// Device returns the wrapped device.
func (t *Transport) Device() Device { return t.dev }

// IRQLine is the interrupt line given to NewTransport.
func (t *Transport) IRQLine() uint32 { return t.line }

// Queue returns queue i (nil if out of range).
func (t *Transport) Queue(i int) *Queue {
	if i < 0 || i >= len(t.queues) {
		return nil
	}
	return t.queues[i]
}

// Features returns the negotiated feature bits.
func (t *Transport) Features() uint64 { return t.features.Load() }

// Memory returns guest memory.
func (t *Transport) Memory() bus.Memory { return t.mem }

func (t *Transport) offered() uint64 {
	return t.dev.Features() | Bit(FVersion1) | Bit(FRingIndirectDesc) | Bit(FRingEventIdx)
}

// Begin and End bracket a device batch that touches guest memory or ring
// state. Begin blocks while the transport is paused; it returns false
// (without the gate held: do not call End) once the transport is closing,
// and the device goroutine must then exit without touching the queues.
// So a device closed while paused does no work after a Save.
func (t *Transport) Begin() bool {
	t.work.RLock()
	if t.closing.Load() {
		t.work.RUnlock()
		return false
	}
	return true
}

// End ends a batch started with Begin.
func (t *Transport) End() { t.work.RUnlock() }

// Pause waits for device batches in flight and holds new ones off until
// Resume, so that guest memory and Save agree. The vCPUs must be stopped.
func (t *Transport) Pause() {
	if t.paused.Load() {
		return
	}
	t.work.Lock()
	t.paused.Store(true)
}

// Resume lets device batches run again after Pause.
func (t *Transport) Resume() {
	if t.paused.Swap(false) {
		t.work.Unlock()
	}
}

// Interrupt sets bits in InterruptStatus and signals the line as an edge.
func (t *Transport) Interrupt(bits uint32) {
	t.intStatus.Or(bits)
	t.pulse()
}

// pulse sends one edge on the line. Pulses are serialized: several device
// goroutines interrupt concurrently (vsock's tx, rx and event), and an
// interleaved raise, raise, lower, lower is a single edge: the IOAPIC (and
// the PIC) only deliver a 0→1 transition. The second interrupt's bits
// would then sit in InterruptStatus after the driver had read it, with no
// edge to make it read again; with EVENT_IDX no later used buffer
// re-signals (used_event does not move until the driver runs), so the
// queue stalls for good.
func (t *Transport) pulse() {
	if t.irq == nil {
		return
	}
	t.edge()
	t.armRepeat()
}

// edge raises and lowers the line once.
func (t *Transport) edge() {
	t.pulseMu.Lock()
	defer t.pulseMu.Unlock()
	t.pulses.Add(1)
	if err := t.irq.SetIRQ(t.line, true); err != nil {
		slog.Error("virtio: raise irq", "line", t.line, "err", err)
	}
	if err := t.irq.SetIRQ(t.line, false); err != nil {
		slog.Error("virtio: lower irq", "line", t.line, "err", err)
	}
}

// SignalUsed interrupts the driver if it wants to hear about the used
// buffers pushed on q since the last call.
func (t *Transport) SignalUsed(q *Queue) {
	if q.NeedInterrupt() {
		t.Interrupt(IntUsedBuffer)
	}
}

// ConfigChanged bumps ConfigGeneration and sends a configuration change
// interrupt.
func (t *Transport) ConfigChanged() {
	t.configGen.Add(1)
	t.Interrupt(IntConfigChange)
}

// Fail puts the device in DEVICE_NEEDS_RESET after the driver broke the
// protocol (a bad chain), and tells the driver. Device goroutines call it
// and then stop touching the queues.
func (t *Transport) Fail(err error) {
	if t.needsReset.Load() {
		return
	}
	slog.Warn("virtio: device needs reset", "id", t.dev.ID(), "line", t.line, "err", err)
	t.intStatus.Or(IntConfigChange)
	t.needsReset.Store(true)
	t.pulse()
}

// Failed reports whether Fail was called since the last reset.
func (t *Transport) Failed() bool { return t.needsReset.Load() }

// ReadMMIO implements bus.MMIODevice.ReadMMIO.
func (t *Transport) ReadMMIO(off uint64, data []byte) {
	clear(data)
	if off >= regConfig {
		t.dev.ReadConfig(off-regConfig, data)
		return
	}
	if len(data) != 4 || off%4 != 0 {
		return // §4.2.2.2: registers are 32-bit only
	}
	var v uint32
	t.mu.Lock()
	q := t.selected()
	switch off {
	case regMagicValue:
		v = magicValue
	case regVersion:
		v = mmioVersion
	case regDeviceID:
		v = t.dev.ID()
	case regVendorID:
		v = vendorID
	case regDeviceFeatures:
		if t.devFeatSel < 2 {
			v = uint32(t.offered() >> (32 * t.devFeatSel))
		}
	case regQueueNumMax:
		if q != nil {
			v = uint32(q.Max)
		}
	case regQueueReady:
		if q != nil && q.Ready {
			v = 1
		}
	case regInterruptStatus:
		v = t.intStatus.Load()
	case regStatus:
		v = t.status
		if t.needsReset.Load() {
			v |= StatusDeviceNeedsReset
		}
	case regConfigGeneration:
		v = t.configGen.Load()
	case regShmLenLow, regShmLenHigh:
		v = 0xffffffff // no shared memory regions
	}
	t.mu.Unlock()
	binary.LittleEndian.PutUint32(data, v)
}

// WriteMMIO implements bus.MMIODevice.WriteMMIO.
func (t *Transport) WriteMMIO(off uint64, data []byte) {
	if off >= regConfig {
		t.dev.WriteConfig(off-regConfig, data)
		return
	}
	if len(data) != 4 || off%4 != 0 {
		return
	}
	v := binary.LittleEndian.Uint32(data)
	if off == regQueueNotify { // the hot path: no lock
		if t.live.Load() && int(v) < len(t.queues) && !t.needsReset.Load() {
			t.dev.Notify(int(v))
		}
		return
	}
	if off == regInterruptAck {
		t.intStatus.And(^v)
		t.acks.Add(1)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.selected()
	// Queue and feature registers are written only while the driver sets
	// the device up: from reset until DRIVER_OK (or FAILED), and then
	// frozen until the next reset, so the rings a live device's goroutines
	// use never change under them (§4.2.2.2: the driver MUST NOT access
	// the queue registers while QueueReady is set). Writes outside that
	// window are ignored; QueueReady reads back what the device uses. A
	// driver stopping one queue while live (QueueReady = 0, §4.2.3.2) is
	// therefore refused too: it must reset the device.
	setup := t.status&(StatusDriverOK|StatusFailed) == 0
	switch off {
	case regDeviceFeaturesSel:
		t.devFeatSel = v
	case regDriverFeaturesSel:
		t.drvFeatSel = v
	case regDriverFeatures:
		if setup && t.status&StatusFeaturesOK == 0 && t.drvFeatSel < 2 {
			shift := 32 * t.drvFeatSel
			t.driverFeatures = t.driverFeatures&^(0xffffffff<<shift) | uint64(v)<<shift
		}
	case regQueueSel:
		t.queueSel = v
	case regQueueNum:
		if setup && q != nil && !q.Ready {
			q.Size = uint16(v)
		}
	case regQueueReady:
		if setup && q != nil {
			q.Ready = v == 1
		}
	case regQueueDescLow, regQueueDescHigh, regQueueDriverLow, regQueueDriverHigh, regQueueDeviceLow, regQueueDeviceHigh:
		if setup && q != nil && !q.Ready {
			p := map[uint64]*uint64{regQueueDescLow: &q.DescAddr, regQueueDriverLow: &q.DriverAddr, regQueueDeviceLow: &q.DeviceAddr}[off&^4]
			if off&4 == 0 {
				*p = *p&^0xffffffff | uint64(v)
			} else {
				*p = *p&0xffffffff | uint64(v)<<32
			}
		}
	case regStatus:
		t.setStatus(v)
	}
}

func (t *Transport) selected() *Queue {
	if int(t.queueSel) < len(t.queues) {
		return t.queues[t.queueSel]
	}
	return nil
}

// statusKnown are the Status bits a driver may write; statusNeeds maps
// each to the bit that must already be set (or set in the same write)
// for it to be accepted: the initialization order of §3.1.1.
const statusKnown = StatusAcknowledge | StatusDriver | StatusFeaturesOK | StatusDriverOK | StatusFailed

var statusNeeds = [...]struct{ bit, needs uint32 }{
	{StatusDriver, StatusAcknowledge},
	{StatusFeaturesOK, StatusDriver},
	{StatusDriverOK, StatusFeaturesOK},
}

// setStatus handles a Status write (§2.1, §3.1.1, §4.2.3.1). t.mu is held.
//
// Between two resets the status only gains bits, in order:
//
//	0 ─▶ ACKNOWLEDGE ─▶ DRIVER ─▶ FEATURES_OK ─▶ DRIVER_OK
//	any state ─▶ + FAILED (the driver gave up: the device stops)
//	any state ─▶ 0 (reset: device stopped, queues and features forgotten)
//
// A write of 0 resets. A write that adds FAILED stops the device and
// keeps the other bits. Any other write must keep every bit already set
// (§2.1.1: the driver MUST NOT clear a device status bit), add only known
// bits and respect the order; otherwise it is ignored and Status reads
// back unchanged. FEATURES_OK is accepted only for a valid feature set.
// So DRIVER_OK is accepted at most once per reset and the device is
// activated at most once: a driver that clears DRIVER_OK, changes the
// queues and sets it again gets nothing. The refusals are logged (the
// VMM's log handler rate-limits them; a guest repeats them at will).
func (t *Transport) setStatus(v uint32) {
	if v == 0 {
		t.reset()
		return
	}
	old := t.status
	v &^= StatusDeviceNeedsReset // the device's bit, never the driver's
	if v&StatusFailed != 0 {
		if old&StatusFailed == 0 {
			t.status = old | StatusFailed
			t.stop()
		}
		return
	}
	if why := statusRefused(old, v); why != "" {
		slog.Warn("virtio: status write refused", "id", t.dev.ID(), "line", t.line,
			"status", fmt.Sprintf("%#x", old), "write", fmt.Sprintf("%#x", v), "why", why)
		return
	}
	if v&StatusFeaturesOK != 0 && old&StatusFeaturesOK == 0 {
		f := t.driverFeatures
		if f&^t.offered() != 0 || f&Bit(FVersion1) == 0 {
			// Refuse: the driver re-reads Status and sees FEATURES_OK
			// clear (§3.1.1 step 6); DRIVER_OK cannot come with it.
			slog.Warn("virtio: features refused", "id", t.dev.ID(), "line", t.line,
				"driver", fmt.Sprintf("%#x", f), "offered", fmt.Sprintf("%#x", t.offered()))
			v &^= StatusFeaturesOK | StatusDriverOK
		}
	}
	t.status = v
	if v&StatusDriverOK != 0 && old&StatusDriverOK == 0 {
		if err := t.activate(); err != nil {
			t.Fail(fmt.Errorf("activate: %w", err))
		}
	}
}

// statusRefused says why the driver may not move Status from old to v (a
// non-zero write without FAILED), or "" if it may.
func statusRefused(old, v uint32) string {
	if v&^statusKnown != 0 {
		return "unknown bits"
	}
	if old&^v != 0 {
		return "clears a bit without a reset"
	}
	for _, n := range statusNeeds {
		if v&n.bit != 0 && v&n.needs == 0 {
			return "out of order"
		}
	}
	return ""
}

// activate maps the queues and starts the device. t.mu is held.
func (t *Transport) activate() error {
	t.features.Store(t.driverFeatures)
	for i, q := range t.queues {
		if err := q.activate(t.mem, t.driverFeatures); err != nil {
			return fmt.Errorf("queue %d: %w", i, err)
		}
	}
	if err := t.dev.Activate(t); err != nil {
		return err
	}
	t.live.Store(true)
	return nil
}

// stop stops a live device's goroutines (waiting for them); the queue
// registers and the status stay as they are until the driver resets.
// t.mu is held.
func (t *Transport) stop() {
	if t.live.Swap(false) {
		t.dev.Reset()
	}
}

// reset returns the transport to its initial state (§2.4, §4.2.2.1: the
// device stopped, Status, InterruptStatus and every QueueReady 0, the
// queues and the negotiated features forgotten). t.mu is held.
func (t *Transport) reset() {
	t.stop()
	t.status, t.devFeatSel, t.drvFeatSel, t.driverFeatures, t.queueSel = 0, 0, 0, 0, 0
	for _, q := range t.queues {
		*q = Queue{Max: q.Max}
	}
	t.features.Store(0)
	t.intStatus.Store(0)
	t.needsReset.Store(false)
}

// Close stops a live device (as a driver reset would) so that its
// goroutines exit; used when the VM shuts down, possibly paused: the
// device goroutines are let go, find Begin refusing and exit without
// touching the queues. After Close returns, the device never touches guest
// memory again.
func (t *Transport) Close() {
	debugUnregister(t)
	t.closing.Store(true)
	t.stopRepeat()
	t.Resume()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stop()
}
