package vsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

// Device is a virtio-vsock device: a guest's rx, tx and event queues
// (rx.go, tx.go) on one side, a unix listener and one unix stream per
// connection (host.go) on the other.
type Device struct {
	t   *virtio.Transport
	cid uint64
	uds string
	ln  *net.UnixListener

	rxKick, txKick, evKick virtio.Kick
	run                    virtio.Runner
	lnDone                 chan struct{}
	tx                     txSignal // used only by the tx goroutine (tx.go)

	mu         sync.Mutex // guards the fields below and every conn's fields
	conns      map[key]*conn
	ctrl       []ctrlPkt // control packets waiting for an RX buffer
	order      []*conn   // round-robin order for data
	nextPort   uint32
	resetEvent bool // a TRANSPORT_RESET event is due
	// After a TRANSPORT_RESET the guest resets its connected sockets in
	// its event work, which runs independently of its rx work: a REQUEST
	// delivered meanwhile could be reset too. So packets to the guest are
	// held from the restore until the guest has handled the event, which
	// it shows by putting the event buffer back (avail.idx moves past
	// evMark). There is no time limit: a restored guest may run seconds
	// later under load, and one that never handles the event only keeps
	// its own vsock silent.
	resetInFlight bool
	evMark        uint16
	resetSent     time.Time // when the event was put in the guest's queue
	resetNudged   time.Time // when the guest was last interrupted again for it
	closed        bool
}

// Config describes a vsock device.
type Config struct {
	// GuestCID is the guest's context ID (default 3).
	GuestCID uint64
	// UDS is the host unix socket path (see the package doc).
	UDS string
}

const (
	rxQueue = 0
	txQueue = 1
	evQueue = 2

	queueSize   = 256
	evQueueSize = 16

	// bufAlloc is the receive buffer the VMM advertises per connection:
	// at most this much guest data waits to be written to a unix socket.
	bufAlloc = 256 << 10
	// rxHigh bounds host data read ahead of the guest's credit; a
	// connection's reader reads up to this much at once, so that a
	// message written in one piece reaches the guest in one batch of
	// packets (one interrupt).
	rxHigh = 256 << 10
	// maxPayload caps one packet's payload (VIRTIO_VSOCK_MAX_PKT_BUF_SIZE).
	maxPayload = 64 << 10
	// firstLocalPort is where host-initiated connections' ports start.
	firstLocalPort = 1 << 30
	// connectTimeout bounds reading "CONNECT <port>\n".
	connectTimeout = 10 * time.Second
	// maxConns bounds a guest's connections (REQUESTs beyond it get RST),
	// maxCtrl the control packets waiting for RX buffers (a guest that
	// provokes RSTs without posting buffers loses the excess ones).
	maxConns = 1024
	maxCtrl  = 4096
	// resetPoll is how often held packets look whether the guest has
	// handled a TRANSPORT_RESET (it does not notify for the event buffer
	// it puts back). After resetSlow they look every resetSlowPoll, and
	// each resetSlow the guest is interrupted again: an edge it missed
	// (say while its line was masked) would otherwise leave the event and
	// every held packet waiting for good; a spurious interrupt is harmless.
	resetPoll, resetSlowPoll, resetSlow = 5 * time.Millisecond, 100 * time.Millisecond, time.Second
)

var _ virtio.Device = (*Device)(nil)

// New returns a virtio-vsock device whose interrupt is line, listening on
// cfg.UDS (a stale socket file there is replaced).
func New(mem bus.Memory, irq bus.IRQ, line uint32, cfg Config) (*Device, error) {
	if cfg.GuestCID == 0 {
		cfg.GuestCID = 3
	}
	if cfg.GuestCID <= HostCID || cfg.GuestCID >= 0xffffffff {
		return nil, fmt.Errorf("vsock: bad guest cid %d", cfg.GuestCID)
	}
	if cfg.UDS == "" {
		return nil, errors.New("vsock: no unix socket path")
	}
	// sockaddr_un holds 107 bytes of path; "<uds>_<port>" adds up to 11.
	if len(cfg.UDS)+11 > 107 {
		return nil, fmt.Errorf("vsock: socket path too long (%d bytes, at most 96) %q", len(cfg.UDS), cfg.UDS)
	}
	os.Remove(cfg.UDS)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.UDS, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vsock: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	d := &Device{
		cid: cfg.GuestCID, uds: cfg.UDS, ln: ln,
		rxKick: virtio.NewKick(), txKick: virtio.NewKick(), evKick: virtio.NewKick(),
		lnDone: make(chan struct{}), conns: map[key]*conn{}, nextPort: firstLocalPort,
	}
	d.t = virtio.NewTransport(d, mem, irq, line)
	go d.acceptLoop()
	return d, nil
}

// Transport is the device's virtio-mmio window (a bus.MMIODevice).
func (d *Device) Transport() *virtio.Transport { return d.t }

// ID implements virtio.Device.ID.
func (d *Device) ID() uint32 { return virtio.IDVsock }

// Features implements virtio.Device.Features (stream only).
func (d *Device) Features() uint64 { return 0 }

// QueueMax implements virtio.Device.QueueMax: rx, tx, event.
func (d *Device) QueueMax() []uint16 { return []uint16{queueSize, queueSize, evQueueSize} }

// ReadConfig implements virtio.Device.ReadConfig: guest_cid u64 at 0.
func (d *Device) ReadConfig(off uint64, data []byte) {
	var c [8]byte
	for i := range c {
		c[i] = byte(d.cid >> (8 * i))
	}
	if off < 8 {
		copy(data, c[off:])
	}
}

// WriteConfig implements virtio.Device.WriteConfig (read-only).
func (d *Device) WriteConfig(off uint64, data []byte) {}

// Notify implements virtio.Device.Notify.
func (d *Device) Notify(q int) {
	switch q {
	case rxQueue:
		d.rxKick.Kick()
	case txQueue:
		d.txKick.Kick()
	case evQueue:
		d.evKick.Kick()
	}
}

// Activate implements virtio.Device.Activate.
func (d *Device) Activate(t *virtio.Transport) error {
	d.run.Go(func(stop <-chan struct{}) {
		d.tx = txSignal{}
		t.Loop(stop, d.txKick, d.drainTx)
	})
	d.run.Go(func(stop <-chan struct{}) { t.Loop(stop, d.rxKick, d.fillRx) })
	d.run.Go(func(stop <-chan struct{}) { t.Loop(stop, d.evKick, d.sendEvents) })
	return nil
}

// Reset implements virtio.Device.Reset: the driver is gone, so every
// connection is dropped.
func (d *Device) Reset() {
	d.run.Stop()
	d.mu.Lock()
	for _, c := range d.conns {
		d.dropLocked(c, false)
	}
	d.ctrl = nil
	d.resetEvent, d.resetInFlight = false, false
	d.mu.Unlock()
}

// Close stops the device, its listener and every connection.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.ln.Close()
	<-d.lnDone
	d.t.Close()
	d.mu.Lock()
	for _, c := range d.conns {
		d.dropLocked(c, false)
	}
	d.mu.Unlock()
	return nil
}

// DebugState implements virtio.DebugStater: connections and their credit.
func (d *Device) DebugState() string {
	if !virtio.LockForDump(&d.mu) {
		return "  vsock: mu held (not dumped)\n"
	}
	defer d.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "  vsock: conns=%d ctrl=%d resetEvent=%v resetInFlight=%v\n", len(d.conns), len(d.ctrl), d.resetEvent, d.resetInFlight)
	for _, c := range d.order {
		fmt.Fprintf(&b, "  conn %d<->%d state=%d rx=%d txCnt=%d peerBufAlloc=%d peerFwdCnt=%d credit=%d creditRequest=%v hostEOF=%v sentShutdown=%v out=%d pendingWrite=%d fwdCnt=%d lastFwdSent=%d noSend=%v noRecv=%v\n",
			c.local, c.peer, c.state, len(c.rx), c.txCnt, c.peerBufAlloc, c.peerFwdCnt, c.peerCredit(), c.creditRequest, c.hostEOF, c.sentShutdown,
			len(c.out), c.pendingWrite, c.fwdCnt, c.lastFwdSent, c.guestNoSend, c.guestNoRecv)
	}
	return b.String()
}
