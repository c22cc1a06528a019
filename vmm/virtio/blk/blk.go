// Package blk is virtio-blk (virtio 1.x §5.2) over a Disk, normally a COW
// view of a shared template image (see COW).
//
// Requests are served one at a time by the device goroutine, straight
// between guest memory and the Disk (no bounce buffer).
package blk

import (
	"encoding/binary"
	"fmt"
	"log/slog"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// Feature bits (include/uapi/linux/virtio_blk.h).
const (
	fSegMax = 2 // VIRTIO_BLK_F_SEG_MAX
	fRO     = 5 // VIRTIO_BLK_F_RO
	fFlush  = 9 // VIRTIO_BLK_F_FLUSH
)

// Request types and status values.
const (
	tIn    = 0 // VIRTIO_BLK_T_IN
	tOut   = 1 // VIRTIO_BLK_T_OUT
	tFlush = 4 // VIRTIO_BLK_T_FLUSH
	tGetID = 8 // VIRTIO_BLK_T_GET_ID

	sOK     = 0 // VIRTIO_BLK_S_OK
	sIOErr  = 1 // VIRTIO_BLK_S_IOERR
	sUnsupp = 2 // VIRTIO_BLK_S_UNSUPP

	sectorSize = 512
	idLen      = 20 // VIRTIO_BLK_ID_BYTES
	queueSize  = 256
)

// Config describes a block device.
type Config struct {
	ReadOnly bool
	// ID is returned by GET_ID (at most 20 bytes; /sys/block/vdX/serial).
	ID string
}

// Device is a virtio-blk device.
type Device struct {
	t    *virtio.Transport
	disk Disk
	cfg  Config
	kick virtio.Kick
	run  virtio.Runner
	hdr  [16]byte
}

var _ virtio.Device = (*Device)(nil)

// New returns a virtio-blk device over disk whose interrupt is line. The
// device does not own disk: close it after Close.
func New(mem bus.Memory, irq bus.IRQ, line uint32, disk Disk, cfg Config) (*Device, error) {
	if len(cfg.ID) > idLen {
		return nil, fmt.Errorf("blk: id %q longer than %d bytes", cfg.ID, idLen)
	}
	if disk.Size()%sectorSize != 0 {
		return nil, fmt.Errorf("blk: disk size %d is not a multiple of %d", disk.Size(), sectorSize)
	}
	d := &Device{disk: disk, cfg: cfg, kick: virtio.NewKick()}
	d.t = virtio.NewTransport(d, mem, irq, line)
	return d, nil
}

// Transport is the device's virtio-mmio window (a bus.MMIODevice).
func (d *Device) Transport() *virtio.Transport { return d.t }

// ID implements virtio.Device.ID.
func (d *Device) ID() uint32 { return virtio.IDBlock }

// Features implements virtio.Device.Features.
func (d *Device) Features() uint64 {
	f := virtio.Bit(fSegMax) | virtio.Bit(fFlush)
	if d.cfg.ReadOnly {
		f |= virtio.Bit(fRO)
	}
	return f
}

// QueueMax implements virtio.Device.QueueMax: one request queue.
func (d *Device) QueueMax() []uint16 { return []uint16{queueSize} }

// ReadConfig implements virtio.Device.ReadConfig. Layout (struct
// virtio_blk_config): capacity u64 (512-byte sectors) at 0, size_max u32
// at 8, seg_max u32 at 12.
func (d *Device) ReadConfig(off uint64, data []byte) {
	var c [16]byte
	binary.LittleEndian.PutUint64(c[0:], uint64(d.disk.Size()/sectorSize))
	binary.LittleEndian.PutUint32(c[12:], queueSize-2)
	if off < uint64(len(c)) {
		copy(data, c[off:])
	}
}

// WriteConfig implements virtio.Device.WriteConfig (nothing is writable).
func (d *Device) WriteConfig(off uint64, data []byte) {}

// Notify implements virtio.Device.Notify.
func (d *Device) Notify(int) { d.kick.Kick() }

// Activate implements virtio.Device.Activate.
func (d *Device) Activate(t *virtio.Transport) error {
	q := t.Queue(0)
	d.run.Go(func(stop <-chan struct{}) {
		t.Loop(stop, d.kick, func() bool { return t.Drain(q, d.serve) })
	})
	return nil
}

// Reset implements virtio.Device.Reset.
func (d *Device) Reset() { d.run.Stop() }

// Close stops the device (not the disk).
func (d *Device) Close() error {
	d.t.Close()
	return nil
}

// serve handles one request chain (§5.2.6):
//
//	readable: type u32 | reserved u32 | sector u64 | data (OUT)
//	writable: data (IN, GET_ID) | status u8
func (d *Device) serve(c *virtio.Chain) uint32 {
	wbufs, err := c.Buffers(true)
	if err != nil || len(wbufs) == 0 {
		return 0 // nowhere to put a status
	}
	last := wbufs[len(wbufs)-1]
	status := &last[len(last)-1]
	wbufs[len(wbufs)-1] = last[:len(last)-1]
	if n, _ := c.Read(d.hdr[:]); n != len(d.hdr) {
		*status = sIOErr
		return 1
	}
	typ := binary.LittleEndian.Uint32(d.hdr[0:])
	sector := binary.LittleEndian.Uint64(d.hdr[8:])
	var written uint32
	switch typ {
	case tIn, tOut:
		bufs := wbufs
		if typ == tOut {
			if d.cfg.ReadOnly {
				*status = sIOErr
				return 1
			}
			rb, err := c.Buffers(false)
			if err != nil {
				*status = sIOErr
				return 1
			}
			bufs = skip(rb, len(d.hdr))
		}
		st, n := d.rw(typ == tOut, sector, bufs)
		*status = st
		if typ == tIn {
			written = n
		}
	case tFlush:
		*status = sOK
		if err := d.disk.Sync(); err != nil {
			slog.Error("virtio-blk: flush", "err", err)
			*status = sIOErr
		}
	case tGetID:
		id := make([]byte, idLen)
		copy(id, d.cfg.ID)
		for _, b := range wbufs {
			n := copy(b, id)
			id, written = id[n:], written+uint32(n)
		}
		*status = sOK
	default:
		*status = sUnsupp
	}
	return written + 1
}

// rw moves data between bufs and the disk at sector. It checks the whole
// request against the disk size first, so an out-of-range request changes
// nothing.
func (d *Device) rw(write bool, sector uint64, bufs [][]byte) (status byte, n uint32) {
	total := uint64(0)
	for _, b := range bufs {
		total += uint64(len(b))
	}
	size := uint64(d.disk.Size())
	if total%sectorSize != 0 || sector > size/sectorSize || total > size-sector*sectorSize {
		return sIOErr, 0
	}
	off := int64(sector * sectorSize)
	for _, b := range bufs {
		var err error
		if write {
			_, err = d.disk.WriteAt(b, off)
		} else {
			_, err = d.disk.ReadAt(b, off)
		}
		if err != nil {
			slog.Error("virtio-blk: i/o", "write", write, "off", off, "len", len(b), "err", err)
			return sIOErr, n
		}
		off += int64(len(b))
		n += uint32(len(b))
	}
	return sOK, n
}

// skip drops the first n bytes of bufs.
func skip(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 && n > 0 {
		bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
	}
	return bufs
}
