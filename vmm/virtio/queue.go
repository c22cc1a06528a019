package virtio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"sandfs/vmm/bus"
)

// Split virtqueue layout (virtio 1.x §2.7), all little-endian:
//
//	descriptor table (16-byte aligned), Size entries of
//	  +0 addr u64 | +8 len u32 | +12 flags u16 | +14 next u16
//	driver area ("avail", 2-byte aligned)
//	  +0 flags u16 | +2 idx u16 | +4 ring[Size] u16 | used_event u16 (EVENT_IDX)
//	device area ("used", 4-byte aligned)
//	  +0 flags u16 | +2 idx u16 | +4 ring[Size] {id u32, len u32} | avail_event u16 (EVENT_IDX)
const (
	descNext     = 1 // VIRTQ_DESC_F_NEXT
	descWrite    = 2 // VIRTQ_DESC_F_WRITE
	descIndirect = 4 // VIRTQ_DESC_F_INDIRECT

	availNoInterrupt = 1 // VIRTQ_AVAIL_F_NO_INTERRUPT

	// MaxQueueSize is the largest queue size any device offers (§2.7: ≤ 32768).
	MaxQueueSize = 1024
)

// DirtyLogger is implemented by a bus.Memory that must hear about the
// devices' own writes to guest RAM: KVM's dirty log does not see them
// (DESIGN §4), soft-dirty does. Devices call it for every range they write
// (used ring, avail_event, writable buffers).
type DirtyLogger interface {
	MarkDirty(gpa uint64, n int)
}

func markDirty(mem bus.Memory, gpa uint64, n int) {
	if l, ok := mem.(DirtyLogger); ok && n > 0 {
		l.MarkDirty(gpa, n)
	}
}

// ErrBadChain reports a descriptor chain that breaks the spec (loop, out of
// range index, readable after writable, memory outside RAM). The guest is
// hostile: a bad chain puts the device in DEVICE_NEEDS_RESET.
var ErrBadChain = errors.New("bad descriptor chain")

// Queue is one split virtqueue. The register fields are written by the
// transport while the driver sets the queue up (before DRIVER_OK); the ring
// state is used only by the device goroutine that owns the queue, inside
// Transport.Begin/End.
type Queue struct {
	// Registers (guarded by Transport.mu while the device is not live).
	Max        uint16 // QueueNumMax
	Size       uint16 // QueueNum
	Ready      bool   // QueueReady
	DescAddr   uint64 // QueueDescLow/High
	DriverAddr uint64 // QueueDriverLow/High ("avail")
	DeviceAddr uint64 // QueueDeviceLow/High ("used")

	// Ring state, owned by the device goroutine.
	NextAvail uint16 // next avail ring slot to consume
	NextUsed  uint16 // next used ring slot to fill (== used.idx we published)

	mem         bus.Memory
	desc        []byte // descriptor table, 16*Size bytes
	avail       []byte // 6+2*Size bytes
	used        []byte // 6+8*Size bytes
	eventIdx    bool
	indirect    bool
	lastSignal  uint16 // used.idx when we last decided about an interrupt
	pushedSince bool
}

// activate maps the rings; called when the device goes live (DRIVER_OK or
// restore) with the negotiated features.
func (q *Queue) activate(mem bus.Memory, features uint64) error {
	q.mem = mem
	q.eventIdx = features&Bit(FRingEventIdx) != 0
	q.indirect = features&Bit(FRingIndirectDesc) != 0
	if !q.Ready {
		return nil
	}
	if q.Size == 0 || q.Size > q.Max || q.Size&(q.Size-1) != 0 {
		return fmt.Errorf("queue: bad size %d (max %d)", q.Size, q.Max)
	}
	if q.DescAddr%16 != 0 || q.DriverAddr%2 != 0 || q.DeviceAddr%4 != 0 {
		return fmt.Errorf("queue: misaligned rings desc=%#x driver=%#x device=%#x", q.DescAddr, q.DriverAddr, q.DeviceAddr)
	}
	n := int(q.Size)
	var err error
	if q.desc, err = mem.Slice(q.DescAddr, 16*n); err != nil {
		return fmt.Errorf("queue: descriptor table: %w", err)
	}
	// Map the rings with the trailing event field rounded up to a 4-byte
	// word (read and written with 32-bit atomics), falling back to the
	// exact size at the very end of RAM.
	if q.avail, err = mem.Slice(q.DriverAddr, 8+2*n); err != nil {
		if q.avail, err = mem.Slice(q.DriverAddr, 6+2*n); err != nil {
			return fmt.Errorf("queue: driver area: %w", err)
		}
	}
	if q.used, err = mem.Slice(q.DeviceAddr, 8+8*n); err != nil {
		if q.used, err = mem.Slice(q.DeviceAddr, 6+8*n); err != nil {
			return fmt.Errorf("queue: device area: %w", err)
		}
	}
	q.lastSignal = q.NextUsed
	return nil
}

// Live reports whether the queue is mapped and ready for use.
func (q *Queue) Live() bool { return q.Ready && q.used != nil }

func (q *Queue) deactivate() {
	q.desc, q.avail, q.used = nil, nil, nil
}

// load16 reads a little-endian u16 that another CPU may be writing, with
// acquire ordering (a 32-bit atomic load of the aligned word holding it;
// x86 and arm64 are little-endian, which Go's amd64/arm64 ports are).
func load16(b []byte, off int) uint16 {
	p := uintptr(unsafe.Pointer(&b[off]))
	if p%4 == 0 && off+4 <= len(b) {
		return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off]))))
	}
	if p%4 == 2 && off >= 2 {
		return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off-2]))) >> 16)
	}
	return binary.LittleEndian.Uint16(b[off:])
}

// AvailIdx returns the driver's avail.idx (NextAvail if the queue is not
// live).
func (q *Queue) AvailIdx() uint16 {
	if !q.Live() {
		return q.NextAvail
	}
	return load16(q.avail, 2)
}

// Pending reports whether the driver has made chains available that the
// device has not consumed.
func (q *Queue) Pending() bool { return q.Live() && q.AvailIdx() != q.NextAvail }

// Pop takes the next available descriptor chain. ok is false when the
// queue is empty. A malformed chain returns ErrBadChain (wrapped).
func (q *Queue) Pop() (c *Chain, ok bool, err error) {
	if !q.Live() {
		return nil, false, nil
	}
	idx := q.AvailIdx() // acquire: ring entries and descriptors below are visible
	if idx == q.NextAvail {
		return nil, false, nil
	}
	if uint16(idx-q.NextAvail) > q.Size {
		return nil, false, fmt.Errorf("%w: avail.idx %d runs %d ahead of %d (size %d)", ErrBadChain, idx, uint16(idx-q.NextAvail), q.NextAvail, q.Size)
	}
	slot := int(q.NextAvail % q.Size)
	head := binary.LittleEndian.Uint16(q.avail[4+2*slot:])
	q.NextAvail++
	c, err = q.walk(head)
	if err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// Undo gives back the last n popped chains (for a device that popped a
// buffer it could not fill yet).
func (q *Queue) Undo(n uint16) { q.NextAvail -= n }

// Rewalk resolves the chain at head again, for a device that held chains
// across a save and restore: until the device returns a chain, its
// descriptors are the device's and the driver does not change them. The
// chain is checked as Pop checks it.
func (q *Queue) Rewalk(head uint16) (*Chain, error) {
	if !q.Live() {
		return nil, fmt.Errorf("%w: queue not live", ErrBadChain)
	}
	return q.walk(head)
}

func (q *Queue) walk(head uint16) (*Chain, error) {
	if head >= q.Size {
		return nil, fmt.Errorf("%w: head %d >= size %d", ErrBadChain, head, q.Size)
	}
	c := &Chain{Head: head, mem: q.mem}
	table, n := q.desc, int(q.Size)
	i, seen, inIndirect := head, 0, false
	for {
		if int(i) >= n {
			return nil, fmt.Errorf("%w: index %d >= %d", ErrBadChain, i, n)
		}
		if seen++; seen > n {
			return nil, fmt.Errorf("%w: loop", ErrBadChain)
		}
		d := table[16*int(i):]
		addr := binary.LittleEndian.Uint64(d)
		ln := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&descIndirect != 0 {
			if !q.indirect || inIndirect || flags&descNext != 0 {
				return nil, fmt.Errorf("%w: unexpected indirect descriptor", ErrBadChain)
			}
			if ln == 0 || ln%16 != 0 || ln/16 > 65536 {
				return nil, fmt.Errorf("%w: indirect table length %d", ErrBadChain, ln)
			}
			t, err := q.mem.Slice(addr, int(ln))
			if err != nil {
				return nil, fmt.Errorf("%w: indirect table: %v", ErrBadChain, err)
			}
			table, n, i, seen, inIndirect = t, int(ln/16), 0, 0, true
			continue
		}
		w := flags&descWrite != 0
		if !w && len(c.Descs) > 0 && c.Descs[len(c.Descs)-1].Write {
			return nil, fmt.Errorf("%w: readable descriptor after writable", ErrBadChain)
		}
		c.Descs = append(c.Descs, Desc{Addr: addr, Len: ln, Write: w})
		if flags&descNext == 0 {
			return c, nil
		}
		i = next
	}
}

// Push returns a chain to the driver with n bytes written into its
// writable descriptors. The used element is written before used.idx is
// published (release).
func (q *Queue) Push(head uint16, n uint32) {
	if !q.Live() {
		return
	}
	slot := int(q.NextUsed % q.Size)
	e := q.used[4+8*slot:]
	binary.LittleEndian.PutUint32(e, uint32(head))
	binary.LittleEndian.PutUint32(e[4:], n)
	q.NextUsed++
	// used.flags (always 0 here) and used.idx share one aligned word, both
	// owned by the device: one atomic store publishes the element above.
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&q.used[0])), uint32(q.NextUsed)<<16)
	q.pushedSince = true
	markDirty(q.mem, q.DeviceAddr, 4)
	markDirty(q.mem, q.DeviceAddr+4+8*uint64(slot), 8)
}

// NeedInterrupt reports whether the driver wants a used-buffer notification
// for what was pushed since the last call (§2.7.10: avail.flags
// NO_INTERRUPT, or used_event with EVENT_IDX).
func (q *Queue) NeedInterrupt() bool {
	if !q.Live() || !q.pushedSince {
		return false
	}
	q.pushedSince = false
	old := q.lastSignal
	q.lastSignal = q.NextUsed
	if q.eventIdx {
		// The atomic store in Push is a full barrier on amd64 (XCHG), so
		// this read of used_event is not hoisted above it.
		ev := load16(q.avail, 4+2*int(q.Size))
		// vring_need_event (include/uapi/linux/virtio_ring.h)
		return uint16(q.NextUsed-ev-1) < uint16(q.NextUsed-old)
	}
	return load16(q.avail, 0)&availNoInterrupt == 0
}

// SetAvailEvent publishes avail_event = NextAvail (EVENT_IDX), asking the
// driver to notify when it makes the next chain available. Callers re-check
// Pending afterwards to close the race with a driver that just added one.
func (q *Queue) SetAvailEvent() {
	if !q.Live() || !q.eventIdx {
		return
	}
	off := 4 + 8*int(q.Size)
	markDirty(q.mem, q.DeviceAddr+uint64(off), 2)
	if off+4 > len(q.used) {
		binary.LittleEndian.PutUint16(q.used[off:], q.NextAvail)
		atomic.AddUint32((*uint32)(unsafe.Pointer(&q.used[0])), 0) // full barrier
		return
	}
	// CAS on the aligned word: avail_event is its low half; the high half
	// (padding after the ring) is written back unchanged. The locked
	// instruction is also the full barrier before the caller re-reads
	// avail.idx.
	p := (*uint32)(unsafe.Pointer(&q.used[off]))
	for {
		old := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, old, old&^0xffff|uint32(q.NextAvail)) {
			return
		}
	}
}

// Desc is one resolved descriptor of a chain.
type Desc struct {
	Addr  uint64
	Len   uint32
	Write bool // device-writable
}

// Chain is a popped descriptor chain: readable descriptors first, then
// writable ones.
type Chain struct {
	Head  uint16
	Descs []Desc
	mem   bus.Memory

	rd, rdOff int // read cursor: descriptor index, offset in it
	wd, wdOff int // write cursor
	written   uint32
}

// ReadableLen is the total length of the driver-written descriptors.
func (c *Chain) ReadableLen() int {
	n := 0
	for _, d := range c.Descs {
		if !d.Write {
			n += int(d.Len)
		}
	}
	return n
}

// WritableLen is the total length of the device-writable descriptors.
func (c *Chain) WritableLen() int {
	n := 0
	for _, d := range c.Descs {
		if d.Write {
			n += int(d.Len)
		}
	}
	return n
}

// Read implements io.Reader over the readable descriptors, in order.
func (c *Chain) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		for c.rd < len(c.Descs) && !c.Descs[c.rd].Write && c.rdOff == int(c.Descs[c.rd].Len) {
			c.rd, c.rdOff = c.rd+1, 0
		}
		if c.rd >= len(c.Descs) || c.Descs[c.rd].Write {
			if total == 0 {
				return 0, errEOF
			}
			return total, nil
		}
		d := c.Descs[c.rd]
		n := min(len(p), int(d.Len)-c.rdOff)
		b, err := c.mem.Slice(d.Addr+uint64(c.rdOff), n)
		if err != nil {
			return total, fmt.Errorf("%w: %v", ErrBadChain, err)
		}
		copy(p, b)
		p, total, c.rdOff = p[n:], total+n, c.rdOff+n
	}
	return total, nil
}

// Write implements io.Writer over the writable descriptors, in order. It
// fails with io.ErrShortWrite when they are full.
func (c *Chain) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		for c.wd < len(c.Descs) && (!c.Descs[c.wd].Write || c.wdOff == int(c.Descs[c.wd].Len)) {
			c.wd, c.wdOff = c.wd+1, 0
		}
		if c.wd >= len(c.Descs) {
			return total, errShortWrite
		}
		d := c.Descs[c.wd]
		n := min(len(p), int(d.Len)-c.wdOff)
		b, err := c.mem.Slice(d.Addr+uint64(c.wdOff), n)
		if err != nil {
			return total, fmt.Errorf("%w: %v", ErrBadChain, err)
		}
		copy(b, p)
		markDirty(c.mem, d.Addr+uint64(c.wdOff), n)
		p, total, c.wdOff = p[n:], total+n, c.wdOff+n
		c.written += uint32(n)
	}
	return total, nil
}

// Written is the number of bytes written through Write so far.
func (c *Chain) Written() uint32 { return c.written }

// WritableSpace is how many more bytes Write accepts.
func (c *Chain) WritableSpace() int { return c.WritableLen() - int(c.written) }

// Buffers returns the guest-memory slices of the readable (write=false) or
// writable (write=true) descriptors, for zero-copy I/O (readv/writev).
// Writable buffers are reported dirty whole.
func (c *Chain) Buffers(write bool) ([][]byte, error) {
	var bs [][]byte
	for _, d := range c.Descs {
		if d.Write != write || d.Len == 0 {
			continue
		}
		b, err := c.mem.Slice(d.Addr, int(d.Len))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadChain, err)
		}
		if write {
			markDirty(c.mem, d.Addr, int(d.Len))
		}
		bs = append(bs, b)
	}
	return bs, nil
}
