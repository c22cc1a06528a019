// Package net is virtio-net (virtio 1.x §5.1) over a tap file descriptor
// opened with IFF_VNET_HDR and a 12-byte header (see OpenTap). Transmit
// offloads are offered (offload.go): the guest may send TCP segments of up
// to 64 KiB, which the host kernel cuts after the tap, and the VMM
// completes the partial checksum of any other frame. Nothing is offered
// for receiving: the host kernel resolves checksums and segments before a
// frame reaches the tap.
//
// Queue 0 is receive (tap → guest), queue 1 transmit (guest → tap). Each
// has its own goroutine: RX blocks reading the tap, then waits for a guest
// buffer; TX drains the transmit queue on every kick.
package net

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// Feature bits (include/uapi/linux/virtio_net.h).
const (
	fMAC    = 5  // VIRTIO_NET_F_MAC
	fStatus = 16 // VIRTIO_NET_F_STATUS

	statusLinkUp = 1 // VIRTIO_NET_S_LINK_UP

	rxQueue   = 0
	txQueue   = 1
	queueSize = 256

	maxFrame = 65535 + VnetHdrLen
)

// Tap is the host side: each Read returns one frame and each Write sends
// one, both starting with the 12-byte virtio_net_hdr_v1. An *os.File from
// OpenTap is one.
type Tap interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
}

// Config describes a network device.
type Config struct {
	// MAC is the guest's address; zero picks a random locally
	// administered one.
	MAC [6]byte
}

// Device is a virtio-net device.
type Device struct {
	t      *virtio.Transport
	tap    Tap
	mac    [6]byte
	rxKick virtio.Kick
	txKick virtio.Kick
	run    virtio.Runner

	dup *os.File // our pollable duplicate of an *os.File tap, closed by Close

	mu      sync.Mutex // guards stopped
	stopped bool       // set by Reset to tell the RX reader to exit

	// Counters, for tests and status files.
	RxFrames, TxFrames, RxDropped, TxDropped stat
}

type stat struct {
	mu sync.Mutex
	n  uint64
}

func (s *stat) add() { s.mu.Lock(); s.n++; s.mu.Unlock() }

// Load returns the counter's value.
func (s *stat) Load() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.n }

var _ virtio.Device = (*Device)(nil)

// New returns a virtio-net device on tap whose interrupt is line. The
// device does not close tap: the caller does, after Close.
func New(mem bus.Memory, irq bus.IRQ, line uint32, tap Tap, cfg Config) *Device {
	d := &Device{tap: tap, mac: cfg.MAC, rxKick: virtio.NewKick(), txKick: virtio.NewKick()}
	if f, ok := tap.(*os.File); ok {
		if p, err := pollable(f); err == nil {
			d.tap, d.dup = p, p
		} else {
			slog.Warn("virtio-net: tap is not pollable; reset may hang", "err", err)
		}
	}
	if d.mac == [6]byte{} {
		rand.Read(d.mac[:])
		d.mac[0] = d.mac[0]&^1 | 2 // unicast, locally administered
	}
	d.t = virtio.NewTransport(d, mem, irq, line)
	return d
}

// MAC returns the guest's MAC address.
func (d *Device) MAC() [6]byte { return d.mac }

// Transport is the device's virtio-mmio window (a bus.MMIODevice).
func (d *Device) Transport() *virtio.Transport { return d.t }

// ID implements virtio.Device.ID.
func (d *Device) ID() uint32 { return virtio.IDNet }

// Features implements virtio.Device.Features.
func (d *Device) Features() uint64 {
	return virtio.Bit(fMAC) | virtio.Bit(fStatus) | virtio.Bit(fCsum) | virtio.Bit(fHostTSO4) | virtio.Bit(fHostTSO6)
}

// QueueMax implements virtio.Device.QueueMax: receiveq1, transmitq1.
func (d *Device) QueueMax() []uint16 { return []uint16{queueSize, queueSize} }

// ReadConfig implements virtio.Device.ReadConfig (struct
// virtio_net_config): mac[6] at 0, status u16 at 6.
func (d *Device) ReadConfig(off uint64, data []byte) {
	var c [8]byte
	copy(c[:], d.mac[:])
	binary.LittleEndian.PutUint16(c[6:], statusLinkUp)
	if off < uint64(len(c)) {
		copy(data, c[off:])
	}
}

// WriteConfig implements virtio.Device.WriteConfig (read-only space).
func (d *Device) WriteConfig(off uint64, data []byte) {}

// Notify implements virtio.Device.Notify.
func (d *Device) Notify(q int) {
	if q == rxQueue {
		d.rxKick.Kick()
	} else {
		d.txKick.Kick()
	}
}

// Activate implements virtio.Device.Activate.
func (d *Device) Activate(t *virtio.Transport) error {
	d.mu.Lock()
	d.stopped = false
	d.mu.Unlock()
	d.tap.SetReadDeadline(time.Time{})
	tx := t.Queue(txQueue)
	buf := make([]byte, maxFrame)
	d.run.Go(func(stop <-chan struct{}) {
		t.Loop(stop, d.txKick, func() bool {
			return t.Drain(tx, func(c *virtio.Chain) uint32 {
				n, _ := io.ReadFull(c, buf)
				if !prepareTx(buf[:n], t.Features()) {
					d.TxDropped.add()
					return 0
				}
				if _, err := d.tap.Write(buf[:n]); err != nil {
					slog.Warn("virtio-net: tap write", "err", err)
					return 0
				}
				d.TxFrames.add()
				return 0
			})
		})
	})
	d.run.Go(d.rxLoop)
	return nil
}

// rxLoop reads frames from the tap and places each in the next receive
// buffer the guest posted, waiting for one if there is none.
func (d *Device) rxLoop(stop <-chan struct{}) {
	t := d.t
	q := t.Queue(rxQueue)
	buf := make([]byte, maxFrame)
	for {
		n, err := d.tap.Read(buf)
		if err != nil {
			d.mu.Lock()
			stopped := d.stopped
			d.mu.Unlock()
			if stopped || errors.Is(err, os.ErrClosed) || errors.Is(err, io.EOF) {
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			slog.Warn("virtio-net: tap read", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n < VnetHdrLen {
			continue
		}
		frame := buf[:n]
		// num_buffers = 1: one buffer per frame (no MRG_RXBUF).
		binary.LittleEndian.PutUint16(frame[10:], 1)
		for delivered := false; !delivered; {
			if !t.Begin() {
				return
			}
			c, ok, err := q.Pop()
			if err != nil {
				t.End()
				t.Fail(err)
				return
			}
			if ok {
				if c.WritableLen() < n {
					// A buffer too small for the frame: drop the frame and
					// give the buffer back empty.
					d.RxDropped.add()
					q.Push(c.Head, 0)
				} else {
					c.Write(frame)
					q.Push(c.Head, c.Written())
					d.RxFrames.add()
				}
				t.SignalUsed(q)
				delivered = true
			} else {
				q.SetAvailEvent()
				if q.Pending() {
					t.End()
					continue
				}
			}
			t.End()
			if !delivered {
				select {
				case <-stop:
					return
				case <-d.rxKick:
				}
			}
		}
	}
}

// Reset implements virtio.Device.Reset.
func (d *Device) Reset() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.tap.SetReadDeadline(time.Now()) // wake the RX reader
	d.run.Stop()
	d.tap.SetReadDeadline(time.Time{})
}

// Close stops the device (not the caller's tap).
func (d *Device) Close() error {
	d.t.Close()
	if d.dup != nil {
		d.dup.Close()
	}
	return nil
}

// pollable returns a non-blocking duplicate of f registered with Go's
// poller, so that reads can be interrupted with a deadline whatever mode
// the inherited tap fd was in.
func pollable(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var derr error
	if err := sc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup tap: %w", derr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("tap nonblock: %w", err)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
