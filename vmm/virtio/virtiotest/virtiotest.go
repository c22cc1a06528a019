// Package virtiotest is a driver-side harness for testing virtio devices
// without a VM: guest RAM is a []byte, the interrupt line is counted, and
// Driver initializes a device and builds descriptor chains in the fake RAM
// exactly as a guest driver does (virtio 1.x §3.1.1, §2.7.13).
package virtiotest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// Mem is fake guest RAM starting at guest-physical address 0.
type Mem struct{ B []byte }

// NewMem returns n bytes of zeroed RAM (8-byte aligned, as a Go allocation is).
func NewMem(n int) *Mem { return &Mem{B: make([]byte, n)} }

// Slice implements bus.Memory.
func (m *Mem) Slice(gpa uint64, n int) ([]byte, error) {
	if n < 0 || gpa > uint64(len(m.B)) || uint64(n) > uint64(len(m.B))-gpa {
		return nil, fmt.Errorf("memory: [%#x, +%#x) is not RAM", gpa, n)
	}
	return m.B[gpa : gpa+uint64(n) : gpa+uint64(n)], nil
}

// IRQ counts interrupt edges.
type IRQ struct {
	mu    sync.Mutex
	level map[uint32]bool
	Edges atomic.Int64
	ch    chan struct{}
}

// NewIRQ returns an IRQ.
func NewIRQ() *IRQ { return &IRQ{level: map[uint32]bool{}, ch: make(chan struct{}, 1)} }

// SetIRQ implements bus.IRQ.
func (i *IRQ) SetIRQ(line uint32, level bool) error {
	i.mu.Lock()
	rising := level && !i.level[line]
	i.level[line] = level
	i.mu.Unlock()
	if rising {
		i.Edges.Add(1)
		select {
		case i.ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// Level reports the current level of line.
func (i *IRQ) Level(line uint32) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.level[line]
}

var (
	_ bus.Memory = (*Mem)(nil)
	_ bus.IRQ    = (*IRQ)(nil)
)

// Buf describes one descriptor of a chain to add: Data is driver-written
// (readable by the device); a Buf with Write set is device-writable, Len
// bytes long.
type Buf struct {
	Data  []byte
	Write bool
	Len   int
}

// R and W build readable and writable Bufs.
func R(b []byte) Buf { return Buf{Data: b} }

// W builds a device-writable Buf of n bytes.
func W(n int) Buf { return Buf{Write: true, Len: n} }

// Used is a used-ring element, with the chain's writable buffers.
type Used struct {
	ID  uint16
	Len uint32
	// Out holds the writable buffers' contents, concatenated and cut to Len.
	Out []byte
	// All holds the writable buffers' whole contents.
	All []byte
}

// Driver plays the guest driver for one device.
type Driver struct {
	tb   testing.TB
	Dev  bus.MMIODevice
	Mem  *Mem
	IRQ  *IRQ
	mu   sync.Mutex
	next uint64 // bump allocator for buffers
	lo   uint64
	Q    []*Queue
	// Features is the negotiated feature set.
	Features uint64
}

// Queue is the driver's view of one virtqueue.
type Queue struct {
	Index    int
	Size     uint16
	Desc     uint64
	Avail    uint64
	UsedAddr uint64
	free     []uint16
	chains   map[uint16][]uint16 // head → descriptors (or the one pointing to an indirect table)
	writable map[uint16][]Desc
	availIdx uint16
	lastUsed uint16
	Indirect bool // build chains through an indirect table
	eventIdx bool
}

// Desc is a writable region of a pending chain.
type Desc struct {
	Addr uint64
	Len  int
}

// Reg32 reads a 32-bit register.
func (d *Driver) Reg32(off uint64) uint32 {
	b := make([]byte, 4)
	d.Dev.ReadMMIO(off, b)
	return binary.LittleEndian.Uint32(b)
}

// SetReg32 writes a 32-bit register.
func (d *Driver) SetReg32(off uint64, v uint32) {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, v)
	d.Dev.WriteMMIO(off, b)
}

// Config reads n bytes of device configuration space at off.
func (d *Driver) Config(off uint64, n int) []byte {
	b := make([]byte, n)
	d.Dev.ReadMMIO(0x100+off, b)
	return b
}

// Options tune Init.
type Options struct {
	// Accept selects the driver's features from those offered; by default
	// all offered features except EVENT_IDX.
	Accept    func(offered uint64) uint64
	QueueSize uint16 // 0: min(max, 64)
}

// Init resets the device and runs the driver initialization sequence up to
// DRIVER_OK, with every queue set up in mem above 1 MiB.
func Init(tb testing.TB, dev bus.MMIODevice, mem *Mem, irq *IRQ, opt Options) *Driver {
	tb.Helper()
	d := &Driver{tb: tb, Dev: dev, Mem: mem, IRQ: irq, next: 1 << 20}
	if m := d.Reg32(0x000); m != 0x74726976 {
		tb.Fatalf("MagicValue = %#x", m)
	}
	if v := d.Reg32(0x004); v != 2 {
		tb.Fatalf("Version = %d, want 2", v)
	}
	d.SetReg32(0x070, 0)
	d.SetReg32(0x070, virtio.StatusAcknowledge)
	d.SetReg32(0x070, virtio.StatusAcknowledge|virtio.StatusDriver)
	var offered uint64
	for sel := uint32(0); sel < 2; sel++ {
		d.SetReg32(0x014, sel)
		offered |= uint64(d.Reg32(0x010)) << (32 * sel)
	}
	want := offered &^ virtio.Bit(virtio.FRingEventIdx)
	if opt.Accept != nil {
		want = opt.Accept(offered)
	}
	for sel := uint32(0); sel < 2; sel++ {
		d.SetReg32(0x024, sel)
		d.SetReg32(0x020, uint32(want>>(32*sel)))
	}
	st := uint32(virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK)
	d.SetReg32(0x070, st)
	if d.Reg32(0x070)&virtio.StatusFeaturesOK == 0 {
		tb.Fatalf("device refused features %#x (offered %#x)", want, offered)
	}
	d.Features = want
	for i := 0; ; i++ {
		d.SetReg32(0x030, uint32(i))
		max := d.Reg32(0x034)
		if max == 0 {
			break
		}
		size := uint16(min(max, 64))
		if opt.QueueSize != 0 {
			size = min(opt.QueueSize, uint16(max))
		}
		q := &Queue{Index: i, Size: size, chains: map[uint16][]uint16{}, writable: map[uint16][]Desc{},
			eventIdx: want&virtio.Bit(virtio.FRingEventIdx) != 0}
		q.Desc = d.alloc(16*int(size), 16)
		q.Avail = d.alloc(8+2*int(size), 4)
		q.UsedAddr = d.alloc(8+8*int(size), 4)
		for j := range size {
			q.free = append(q.free, j)
		}
		d.SetReg32(0x038, uint32(size))
		d.SetReg32(0x080, uint32(q.Desc))
		d.SetReg32(0x084, uint32(q.Desc>>32))
		d.SetReg32(0x090, uint32(q.Avail))
		d.SetReg32(0x094, uint32(q.Avail>>32))
		d.SetReg32(0x0a0, uint32(q.UsedAddr))
		d.SetReg32(0x0a4, uint32(q.UsedAddr>>32))
		d.SetReg32(0x044, 1)
		d.Q = append(d.Q, q)
	}
	d.lo = d.next
	d.SetReg32(0x070, st|virtio.StatusDriverOK)
	if s := d.Reg32(0x070); s&virtio.StatusDeviceNeedsReset != 0 {
		tb.Fatalf("Status = %#x after DRIVER_OK", s)
	}
	return d
}

// alloc returns n bytes of fake RAM aligned to align; it wraps to the start
// of the buffer area when RAM runs out (tests consume buffers as they go).
func (d *Driver) alloc(n int, align uint64) uint64 {
	d.next = (d.next + align - 1) &^ (align - 1)
	if d.next+uint64(n) > uint64(len(d.Mem.B)) {
		if d.lo == 0 || d.lo+uint64(n) > uint64(len(d.Mem.B)) {
			d.tb.Fatalf("fake RAM exhausted")
		}
		d.next = d.lo
	}
	a := d.next
	d.next += uint64(n)
	clear(d.Mem.B[a : a+uint64(n)])
	return a
}

// Add puts a chain on queue qi's avail ring (without notifying) and
// returns its head.
func (d *Driver) Add(qi int, bufs ...Buf) uint16 {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.Q[qi]
	m := d.Mem.B
	var ws []Desc
	type raw struct {
		addr  uint64
		ln    uint32
		flags uint16
	}
	var rs []raw
	for _, b := range bufs {
		if b.Write {
			a := d.alloc(b.Len, 8)
			rs = append(rs, raw{a, uint32(b.Len), 2})
			ws = append(ws, Desc{a, b.Len})
		} else {
			a := d.alloc(len(b.Data), 8)
			copy(m[a:], b.Data)
			rs = append(rs, raw{a, uint32(len(b.Data)), 0})
		}
	}
	put := func(table uint64, i uint16, r raw, next uint16, more bool) {
		e := m[table+16*uint64(i):]
		binary.LittleEndian.PutUint64(e, r.addr)
		binary.LittleEndian.PutUint32(e[8:], r.ln)
		f := r.flags
		if more {
			f |= 1
		}
		binary.LittleEndian.PutUint16(e[12:], f)
		binary.LittleEndian.PutUint16(e[14:], next)
	}
	var used []uint16
	if q.Indirect {
		if len(q.free) < 1 {
			d.tb.Fatalf("queue %d full", qi)
		}
		t := d.alloc(16*len(rs), 16)
		for i, r := range rs {
			put(t, uint16(i), r, uint16(i+1), i+1 < len(rs))
		}
		used = q.free[:1]
		put(q.Desc, used[0], raw{t, uint32(16 * len(rs)), 4}, 0, false)
	} else {
		if len(q.free) < len(rs) {
			d.tb.Fatalf("queue %d full", qi)
		}
		used = q.free[:len(rs)]
		for i, r := range rs {
			var next uint16
			if i+1 < len(rs) {
				next = used[i+1]
			}
			put(q.Desc, used[i], r, next, i+1 < len(rs))
		}
	}
	head := used[0]
	q.chains[head] = append([]uint16(nil), used...)
	q.free = q.free[len(used):]
	q.writable[head] = ws
	binary.LittleEndian.PutUint16(m[q.Avail+4+2*uint64(q.availIdx%q.Size):], head)
	q.availIdx++
	// avail.flags (0) and avail.idx in one release store.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m[q.Avail])), uint32(q.availIdx)<<16)
	return head
}

// Kick notifies queue qi.
func (d *Driver) Kick(qi int) { d.SetReg32(0x050, uint32(qi)) }

// AddKick is Add then Kick.
func (d *Driver) AddKick(qi int, bufs ...Buf) uint16 {
	h := d.Add(qi, bufs...)
	d.Kick(qi)
	return h
}

// Poll returns the next used element of queue qi, if any, and frees its
// descriptors.
func (d *Driver) Poll(qi int) (Used, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.Q[qi]
	m := d.Mem.B
	idx := uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&m[q.UsedAddr]))) >> 16)
	if idx == q.lastUsed {
		return Used{}, false
	}
	e := m[q.UsedAddr+4+8*uint64(q.lastUsed%q.Size):]
	u := Used{ID: uint16(binary.LittleEndian.Uint32(e)), Len: binary.LittleEndian.Uint32(e[4:])}
	q.lastUsed++
	if q.eventIdx {
		// used_event = lastUsed: interrupt me for the next one.
		p := (*uint32)(unsafe.Pointer(&m[q.Avail+4+2*uint64(q.Size)]))
		for {
			old := atomic.LoadUint32(p)
			if atomic.CompareAndSwapUint32(p, old, old&^0xffff|uint32(q.lastUsed)) {
				break
			}
		}
	}
	descs, ok := q.chains[u.ID]
	if !ok {
		d.tb.Errorf("queue %d: used id %d is not a pending head", qi, u.ID)
		return u, true
	}
	left := int(u.Len)
	for _, w := range q.writable[u.ID] {
		u.All = append(u.All, m[w.Addr:w.Addr+uint64(w.Len)]...)
		n := min(left, w.Len)
		u.Out = append(u.Out, m[w.Addr:w.Addr+uint64(n)]...)
		left -= n
	}
	delete(q.chains, u.ID)
	delete(q.writable, u.ID)
	q.free = append(q.free, descs...)
	return u, true
}

// Wait waits up to timeout for the next used element of queue qi.
func (d *Driver) Wait(qi int, timeout time.Duration) (Used, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if u, ok := d.Poll(qi); ok {
			return u, true
		}
		if time.Now().After(deadline) {
			return Used{}, false
		}
		select {
		case <-d.IRQ.ch:
		case <-time.After(time.Millisecond):
		}
	}
}

// MustWait is Wait failing the test on timeout.
func (d *Driver) MustWait(qi int) Used {
	d.tb.Helper()
	u, ok := d.Wait(qi, 5*time.Second)
	if !ok {
		d.tb.Fatalf("queue %d: no used buffer within 5s", qi)
	}
	return u
}

// Ack reads and acknowledges InterruptStatus.
func (d *Driver) Ack() uint32 {
	s := d.Reg32(0x060)
	d.SetReg32(0x064, s)
	return s
}

// Pending reports how many chains of queue qi the device has not returned.
func (d *Driver) Pending(qi int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.Q[qi].chains)
}

// AvailEvent returns avail_event of queue qi (EVENT_IDX).
func (d *Driver) AvailEvent(qi int) uint16 {
	q := d.Q[qi]
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&d.Mem.B[q.UsedAddr+4+8*uint64(q.Size)])))
	return uint16(w)
}
