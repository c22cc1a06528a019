// Package vsock is virtio-vsock (virtio 1.x §5.10) with the host side as
// unix sockets, Firecracker's "hybrid vsock":
//
//   - guest → host: when the guest connects to host port P (CID 2), the
//     VMM dials the unix socket "<uds>_<P>" and answers RESPONSE, or RST
//     if nothing listens there.
//   - host → guest: the VMM listens on "<uds>"; a client connects and
//     writes "CONNECT <port>\n"; the VMM sends REQUEST to the guest and,
//     once the guest answers RESPONSE, writes "OK <hostport>\n" (the local
//     port it picked) and from then on the unix stream is the connection.
//     If the guest answers RST, the client is disconnected.
//
// Flow control is the spec's credit scheme, both ways: the VMM advertises
// bufAlloc bytes per connection and its fwd_cnt (bytes written to the
// unix socket), and sends guest data only within the guest's advertised
// buf_alloc - (tx_cnt - fwd_cnt).
//
// Goroutines: tx (guest packets), rx (packets to the guest: control first,
// then connection data round-robin), event (TRANSPORT_RESET after a
// restore), the listener's accept loop, and per connection a reader (unix
// → rx buffer) and a writer (guest data → unix). Lock order:
// Transport.work → Device.mu; no I/O on a unix socket is done under mu.
package vsock

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"sandfs/vmm/bus"
	"sandfs/vmm/virtio"
)

const (
	rxQueue = 0
	txQueue = 1
	evQueue = 2

	queueSize   = 256
	evQueueSize = 16

	// bufAlloc is the receive buffer the VMM advertises per connection:
	// at most this much guest data waits to be written to a unix socket.
	bufAlloc = 256 << 10
	// rxHigh bounds host data read ahead of the guest's credit.
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
	// resetHold bounds how long packets wait for a TRANSPORT_RESET to be
	// handled by the guest.
	resetHold = 2 * time.Second
)

// Config describes a vsock device.
type Config struct {
	// GuestCID is the guest's context ID (default 3).
	GuestCID uint64
	// UDS is the host unix socket path (see the package doc).
	UDS string
}

// Device is a virtio-vsock device.
type Device struct {
	t   *virtio.Transport
	cid uint64
	uds string
	ln  *net.UnixListener

	rxKick, txKick, evKick virtio.Kick
	run                    virtio.Runner
	lnDone                 chan struct{}

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
	// evMark), or until resetHold passes.
	resetInFlight bool
	evMark        uint16
	resetSince    time.Time
	closed        bool
}

type key struct{ local, peer uint32 } // host port, guest port

type ctrlPkt struct {
	key
	op    uint16
	flags uint32
}

type connState int

const (
	stDialing    connState = iota // guest REQUEST, dialing <uds>_<port>
	stConnecting                  // host CONNECT, REQUEST sent, awaiting RESPONSE
	stEstablished
	stClosed
)

// conn is one connection; its fields are guarded by Device.mu.
type conn struct {
	key
	uc    *net.UnixConn
	state connState
	cond  *sync.Cond // wakes the reader and writer goroutines

	// host → guest
	rx             []byte // read from the unix socket, not yet sent
	txCnt          uint32 // bytes sent to the guest
	peerBufAlloc   uint32
	peerFwdCnt     uint32
	hostEOF        bool
	sentShutdown   bool
	creditRequest  bool // a CREDIT_REQUEST is out, awaiting the guest's reply
	ctrlCreditSent bool // a CREDIT_UPDATE is queued

	// guest → host
	out          []byte // guest data not yet written to the unix socket
	fwdCnt       uint32 // bytes written to the unix socket
	lastFwdSent  uint32 // fwd_cnt in the last packet sent to the guest
	guestNoSend  bool   // guest SHUTDOWN with SEND: no more data coming
	guestNoRecv  bool   // guest SHUTDOWN with RECEIVE
	wroteShutWr  bool
	pendingWrite int // bytes the writer has taken but not finished writing
}

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
		t.Loop(stop, d.txKick, func() bool { return t.Drain(t.Queue(txQueue), d.handleTx) })
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
	d.resetEvent = false
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

// ---- packets from the guest ----

// handleTx handles one packet from the guest's transmit queue.
func (d *Device) handleTx(ch *virtio.Chain) uint32 {
	var hb [hdrLen]byte
	if n, _ := io.ReadFull(ch, hb[:]); n != hdrLen {
		return 0
	}
	var h hdr
	h.decode(hb[:])
	if h.SrcCID != d.cid || h.DstCID != HostCID {
		return 0 // not from our guest or not to the host: drop
	}
	k := key{local: h.DstPort, peer: h.SrcPort}
	if h.Type != typeStream || h.Len > maxPayload {
		d.queueRST(k)
		return 0
	}
	var payload []byte
	if h.Op == opRW && h.Len > 0 {
		payload = make([]byte, h.Len)
		if n, _ := io.ReadFull(ch, payload); n != int(h.Len) {
			d.queueRST(k)
			return 0
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.conns[k]
	if c != nil {
		d.updateCreditLocked(c, &h)
	}
	switch h.Op {
	case opRequest:
		if c != nil || len(d.conns) >= maxConns {
			d.queueRSTLocked(k)
			return 0
		}
		c = d.newConnLocked(k, nil, stDialing)
		d.updateCreditLocked(c, &h)
		go d.dial(c)
	case opResponse:
		if c == nil || c.state != stConnecting {
			d.queueRSTLocked(k)
			return 0
		}
		c.state = stEstablished
		go d.confirm(c)
	case opRST:
		if c != nil {
			d.dropLocked(c, false)
		}
	case opShutdown:
		if c == nil {
			d.queueRSTLocked(k)
			return 0
		}
		if h.Flags&shutSend != 0 {
			c.guestNoSend = true
		}
		if h.Flags&shutRcv != 0 {
			c.guestNoRecv = true
			c.rx = nil
		}
		c.cond.Broadcast()
		d.maybeFinishLocked(c)
	case opRW:
		if c == nil || c.state != stEstablished || c.guestNoSend {
			d.queueRSTLocked(k)
			return 0
		}
		if len(c.out)+c.pendingWrite+len(payload) > bufAlloc {
			slog.Warn("vsock: guest overran its credit", "port", k.local, "peer", k.peer)
			d.dropLocked(c, true)
			return 0
		}
		c.out = append(c.out, payload...)
		c.cond.Broadcast()
	case opCreditUpdate:
		// updateCreditLocked did the work.
	case opCreditRequest:
		if c != nil {
			d.queueCreditUpdateLocked(c)
		}
	default:
		if c != nil {
			d.dropLocked(c, true)
		} else {
			d.queueRSTLocked(k)
		}
	}
	return 0
}

func (d *Device) updateCreditLocked(c *conn, h *hdr) {
	if c.peerBufAlloc != h.BufAlloc || c.peerFwdCnt != h.FwdCnt {
		c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt
		c.creditRequest = false
		if len(c.rx) > 0 {
			d.rxKick.Kick()
		}
	}
}

// peerCredit is how many bytes the guest can take now.
func (c *conn) peerCredit() uint32 {
	inFlight := c.txCnt - c.peerFwdCnt
	if inFlight >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - inFlight
}

func (d *Device) newConnLocked(k key, uc *net.UnixConn, st connState) *conn {
	c := &conn{key: k, uc: uc, state: st, cond: sync.NewCond(&d.mu)}
	d.conns[k] = c
	d.order = append(d.order, c)
	return c
}

// dial connects a guest REQUEST to <uds>_<port>.
func (d *Device) dial(c *conn) {
	path := d.uds + "_" + strconv.FormatUint(uint64(c.local), 10)
	uc, err := net.DialTimeout("unix", path, 2*time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != stDialing { // dropped meanwhile
		if err == nil {
			uc.Close()
		}
		return
	}
	if err != nil {
		slog.Debug("vsock: guest connect refused", "port", c.local, "err", err)
		d.dropLocked(c, true)
		return
	}
	c.uc = uc.(*net.UnixConn)
	c.state = stEstablished
	d.queueCtrlLocked(c.key, opResponse, 0)
	d.startLocked(c)
}

// confirm tells a host client its connection is accepted.
func (d *Device) confirm(c *conn) {
	_, err := fmt.Fprintf(c.uc, "OK %d\n", c.local)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != stEstablished {
		return
	}
	if err != nil {
		d.dropLocked(c, true)
		return
	}
	d.startLocked(c)
}

func (d *Device) startLocked(c *conn) {
	go d.reader(c)
	go d.writer(c)
}

// reader moves host data into c.rx, staying at most rxHigh ahead.
func (d *Device) reader(c *conn) {
	buf := make([]byte, maxPayload)
	for {
		d.mu.Lock()
		for c.state == stEstablished && !c.guestNoRecv && len(c.rx) >= rxHigh {
			c.cond.Wait()
		}
		if c.state != stEstablished || c.guestNoRecv {
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		n, err := c.uc.Read(buf)
		d.mu.Lock()
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		if n > 0 && !c.guestNoRecv {
			c.rx = append(c.rx, buf[:n]...)
			d.rxKick.Kick()
		}
		if err != nil {
			c.hostEOF = true
			d.rxKick.Kick()
			d.maybeFinishLocked(c)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
}

// writer moves guest data from c.out to the unix socket and returns credit.
func (d *Device) writer(c *conn) {
	for {
		d.mu.Lock()
		for c.state == stEstablished && len(c.out) == 0 && !(c.guestNoSend && !c.wroteShutWr) {
			c.cond.Wait()
		}
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		if len(c.out) == 0 { // guest shut down sending, all written
			c.wroteShutWr = true
			d.mu.Unlock()
			c.uc.CloseWrite()
			d.mu.Lock()
			d.maybeFinishLocked(c)
			d.mu.Unlock()
			return
		}
		data := c.out
		c.out = nil
		c.pendingWrite = len(data)
		d.mu.Unlock()
		n, err := c.uc.Write(data)
		d.mu.Lock()
		c.pendingWrite = 0
		if c.state != stEstablished {
			d.mu.Unlock()
			return
		}
		c.fwdCnt += uint32(n)
		if err != nil {
			d.dropLocked(c, true)
			d.mu.Unlock()
			return
		}
		if c.fwdCnt-c.lastFwdSent >= bufAlloc/4 {
			d.queueCreditUpdateLocked(c)
		}
		d.mu.Unlock()
	}
}

// maybeFinishLocked ends a connection both sides are done with: the host
// sent EOF and all of it reached the guest, and the guest shut down
// sending and all of its data reached the host; or the guest shut down
// both ways.
func (d *Device) maybeFinishLocked(c *conn) {
	if c.state != stEstablished {
		return
	}
	hostDone := c.guestNoRecv || (c.hostEOF && len(c.rx) == 0 && c.sentShutdown)
	guestDone := c.guestNoSend && len(c.out) == 0 && c.pendingWrite == 0 && c.wroteShutWr
	if hostDone && guestDone {
		d.dropLocked(c, true)
	}
}

// dropLocked forgets c, closes its socket (waking its goroutines) and,
// if rst, tells the guest.
func (d *Device) dropLocked(c *conn, rst bool) {
	if d.conns[c.key] == c {
		delete(d.conns, c.key)
	}
	for i, o := range d.order {
		if o == c {
			d.order = append(d.order[:i], d.order[i+1:]...)
			break
		}
	}
	c.state = stClosed
	if c.uc != nil {
		c.uc.Close()
	}
	c.cond.Broadcast()
	if rst {
		d.queueRSTLocked(c.key)
	}
}

func (d *Device) queueRST(k key) {
	d.mu.Lock()
	d.queueRSTLocked(k)
	d.mu.Unlock()
}

func (d *Device) queueRSTLocked(k key) { d.queueCtrlLocked(k, opRST, 0) }

func (d *Device) queueCreditUpdateLocked(c *conn) {
	if !c.ctrlCreditSent {
		c.ctrlCreditSent = true
		d.queueCtrlLocked(c.key, opCreditUpdate, 0)
	}
}

func (d *Device) queueCtrlLocked(k key, op uint16, flags uint32) {
	if len(d.ctrl) >= maxCtrl && op == opRST {
		return
	}
	d.ctrl = append(d.ctrl, ctrlPkt{k, op, flags})
	d.rxKick.Kick()
}

// ---- packets to the guest ----

// fillRx puts pending packets into the guest's receive buffers. It runs
// between Transport.Begin and End.
func (d *Device) fillRx() bool {
	q := d.t.Queue(rxQueue)
	sent := false
	defer func() {
		if sent {
			d.t.SignalUsed(q)
		}
	}()
	var hb [hdrLen]byte
	for {
		ch, ok, err := q.Pop()
		if err != nil {
			d.t.Fail(err)
			return false
		}
		if !ok {
			q.SetAvailEvent()
			if q.Pending() {
				continue
			}
			return true
		}
		room := ch.WritableLen() - hdrLen
		if room < 0 {
			q.Push(ch.Head, 0)
			sent = true
			continue
		}
		d.mu.Lock()
		h, payload, ok := d.nextRxLocked(room)
		if !ok {
			d.mu.Unlock()
			q.Undo(1)
			return true
		}
		h.encode(hb[:])
		ch.Write(hb[:])
		ch.Write(payload)
		d.mu.Unlock()
		q.Push(ch.Head, ch.Written())
		sent = true
	}
}

// nextRxLocked picks the next packet for the guest: control packets
// first, then data from connections in turn, within the guest's credit.
func (d *Device) nextRxLocked(room int) (h hdr, payload []byte, ok bool) {
	h = hdr{SrcCID: HostCID, DstCID: d.cid, Type: typeStream, BufAlloc: bufAlloc}
	if d.holdLocked() {
		return h, nil, false
	}
	for len(d.ctrl) > 0 {
		p := d.ctrl[0]
		d.ctrl = d.ctrl[1:]
		h.SrcPort, h.DstPort, h.Op, h.Flags = p.local, p.peer, p.op, p.flags
		if c := d.conns[p.key]; c != nil {
			if p.op == opCreditUpdate {
				c.ctrlCreditSent = false
			}
			h.FwdCnt = c.fwdCnt
			c.lastFwdSent = c.fwdCnt
		} else if p.op != opRST {
			continue // the connection went away meanwhile
		}
		return h, nil, true
	}
	for range len(d.order) {
		c := d.order[0]
		d.order = append(d.order[1:], c)
		if c.state != stEstablished || c.guestNoRecv {
			continue
		}
		h.SrcPort, h.DstPort, h.FwdCnt = c.local, c.peer, c.fwdCnt
		if len(c.rx) > 0 {
			credit := c.peerCredit()
			if credit == 0 {
				if !c.creditRequest {
					c.creditRequest = true
					h.Op = opCreditRequest
					c.lastFwdSent = c.fwdCnt
					return h, nil, true
				}
				continue
			}
			n := min(len(c.rx), int(credit), room, maxPayload)
			payload = c.rx[:n]
			c.rx = c.rx[n:]
			if len(c.rx) == 0 {
				c.rx = nil // payload stays valid: it is copied before mu is released
			}
			c.txCnt += uint32(n)
			h.Op, h.Len = opRW, uint32(n)
			c.lastFwdSent = c.fwdCnt
			c.cond.Broadcast() // the reader may be waiting for room
			return h, payload, true
		}
		if c.hostEOF && !c.sentShutdown {
			c.sentShutdown = true
			h.Op, h.Flags = opShutdown, shutSend
			c.lastFwdSent = c.fwdCnt
			d.maybeFinishLocked(c)
			return h, nil, true
		}
	}
	return h, nil, false
}

// holdLocked reports whether packets to the guest must wait for a
// TRANSPORT_RESET to be handled; while they do, it re-kicks the rx
// goroutine shortly (the guest does not notify for the event buffer it
// puts back).
func (d *Device) holdLocked() bool {
	if !d.resetEvent && !d.resetInFlight {
		return false
	}
	if time.Since(d.resetSince) > resetHold {
		slog.Warn("vsock: guest did not handle TRANSPORT_RESET in time; sending anyway")
		d.resetEvent, d.resetInFlight = false, false
		return false
	}
	if q := d.t.Queue(evQueue); !q.Live() || d.resetInFlight && q.AvailIdx() != d.evMark {
		d.resetEvent, d.resetInFlight = false, false
		return false
	}
	time.AfterFunc(5*time.Millisecond, d.rxKick.Kick)
	return true
}

// sendEvents delivers a pending TRANSPORT_RESET event.
func (d *Device) sendEvents() bool {
	d.mu.Lock()
	due := d.resetEvent
	d.mu.Unlock()
	if !due {
		return true
	}
	q := d.t.Queue(evQueue)
	ch, ok, err := q.Pop()
	if err != nil {
		d.t.Fail(err)
		return false
	}
	if !ok {
		q.SetAvailEvent()
		return true
	}
	ch.Write([]byte{eventTransportReset, 0, 0, 0}) // struct virtio_vsock_event { le32 id }
	d.mu.Lock()
	d.evMark = q.AvailIdx() // before the guest can see the event and refill
	d.resetEvent, d.resetInFlight = false, true
	d.mu.Unlock()
	q.Push(ch.Head, ch.Written())
	d.t.SignalUsed(q)
	return true
}

// ---- host-initiated connections ----

func (d *Device) acceptLoop() {
	defer close(d.lnDone)
	for {
		uc, err := d.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			slog.Warn("vsock: accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go d.hostConnect(uc)
	}
}

// hostConnect reads "CONNECT <port>\n" and asks the guest.
func (d *Device) hostConnect(uc *net.UnixConn) {
	uc.SetReadDeadline(time.Now().Add(connectTimeout))
	port, err := readConnect(uc)
	uc.SetReadDeadline(time.Time{})
	if err != nil {
		slog.Debug("vsock: bad host connect", "err", err)
		uc.Close()
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.conns) >= maxConns {
		uc.Close()
		return
	}
	local := d.nextPort
	for {
		if _, used := d.conns[key{local, port}]; !used {
			break
		}
		local++
	}
	d.nextPort = local + 1
	if d.nextPort < firstLocalPort {
		d.nextPort = firstLocalPort
	}
	c := d.newConnLocked(key{local: local, peer: port}, uc, stConnecting)
	d.queueCtrlLocked(c.key, opRequest, 0)
}

// readConnect reads the "CONNECT <port>\n" line byte by byte, so that
// no data after it is consumed.
func readConnect(r io.Reader) (port uint32, err error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, fmt.Errorf("vsock: read connect line: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if line = append(line, b[0]); len(line) > 64 {
			return 0, fmt.Errorf("vsock: connect line too long")
		}
	}
	f := strings.Fields(string(line))
	if len(f) != 2 || f[0] != "CONNECT" {
		return 0, fmt.Errorf("vsock: bad connect line %q", strings.TrimSpace(string(line)))
	}
	p, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("vsock: bad port %q", f[1])
	}
	return uint32(p), nil
}

// DebugState implements virtio.DebugStater: connections and their credit.
func (d *Device) DebugState() string {
	if !d.mu.TryLock() {
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
