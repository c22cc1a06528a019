package vsock

import (
	"io"
	"log/slog"
	"time"

	"sandfs/vmm/virtio"
)

// handleTx handles one packet from the guest's transmit queue.
func (d *Device) handleTx(ch *virtio.Chain) uint32 {
	h, payload, ok := d.readTxPacket(ch)
	if !ok {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := key{local: h.DstPort, peer: h.SrcPort}
	c := d.conns[k]
	if c != nil {
		d.updateCreditLocked(c, &h)
	}
	switch h.Op {
	case opRequest:
		d.guestRequestLocked(k, c, &h)
	case opResponse:
		d.guestResponseLocked(k, c)
	case opRST:
		if c != nil {
			if c.state == stEstablished && !c.guestNoSend && !c.guestNoRecv {
				// A guest closing a socket shuts it down first: an
				// abrupt end (a reset transport, a killed agent) is
				// worth a line, as the host's side only sees EOF.
				slog.Info("vsock: guest reset an open connection", "port", k.local, "peer", k.peer)
			}
			d.dropLocked(c, false)
		}
	case opShutdown:
		d.guestShutdownLocked(k, c, h.Flags)
	case opRW:
		d.guestDataLocked(k, c, payload)
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

// readTxPacket reads a packet's header and, for RW, its payload. A packet
// not from our guest to the host is dropped; one of the wrong type, too
// long or cut short is answered with RST; either way ok is false.
func (d *Device) readTxPacket(ch *virtio.Chain) (h hdr, payload []byte, ok bool) {
	var hb [hdrLen]byte
	if n, _ := io.ReadFull(ch, hb[:]); n != hdrLen {
		return h, nil, false
	}
	h.decode(hb[:])
	if h.SrcCID != d.cid || h.DstCID != HostCID {
		return h, nil, false // not from our guest or not to the host: drop
	}
	k := key{local: h.DstPort, peer: h.SrcPort}
	if h.Type != typeStream || h.Len > maxPayload {
		d.queueRST(k)
		return h, nil, false
	}
	if h.Op == opRW && h.Len > 0 {
		payload = make([]byte, h.Len)
		if n, _ := io.ReadFull(ch, payload); n != int(h.Len) {
			d.queueRST(k)
			return h, nil, false
		}
	}
	return h, payload, true
}

// guestRequestLocked handles a guest's REQUEST (c is the connection k
// already names, if any): a new connection is dialed to "<uds>_<port>".
func (d *Device) guestRequestLocked(k key, c *conn, h *hdr) {
	if c != nil || len(d.conns) >= maxConns {
		d.queueRSTLocked(k)
		return
	}
	c = d.newConnLocked(k, nil, stDialing)
	d.updateCreditLocked(c, h)
	go d.dial(c)
}

// guestResponseLocked handles a guest's RESPONSE to a host CONNECT.
func (d *Device) guestResponseLocked(k key, c *conn) {
	if c == nil || c.state != stConnecting {
		d.queueRSTLocked(k)
		return
	}
	c.state = stEstablished
	go d.confirm(c)
}

// guestShutdownLocked handles a guest's SHUTDOWN with flags.
func (d *Device) guestShutdownLocked(k key, c *conn, flags uint32) {
	if c == nil {
		d.queueRSTLocked(k)
		return
	}
	if flags&shutSend != 0 {
		c.guestNoSend = true
	}
	if flags&shutRcv != 0 {
		c.guestNoRecv = true
		c.rx = nil
	}
	c.cond.Broadcast()
	d.maybeFinishLocked(c)
}

// guestDataLocked handles a guest's RW: payload waits in c.out for the
// writer. A guest that sends beyond the credit it was given is reset.
func (d *Device) guestDataLocked(k key, c *conn, payload []byte) {
	if c == nil || c.state != stEstablished || c.guestNoSend {
		d.queueRSTLocked(k)
		return
	}
	if len(c.out)+c.pendingWrite+len(payload) > bufAlloc {
		slog.Warn("vsock: guest overran its credit", "port", k.local, "peer", k.peer)
		d.dropLocked(c, true)
		return
	}
	c.out = append(c.out, payload...)
	c.cond.Broadcast()
}

// Used-buffer notifications of the tx queue are deferred. The guest
// needs them only to free the packets it sent (virtio_transport_tx_work),
// never to go on sending (until the ring fills), and virtio-mmio has one
// interrupt for all queues: the next rx interrupt (the host's reply, the
// next request) frees them too. Each interrupt costs the guest exits
// (InterruptStatus, InterruptACK, the EOI), which are what bounds vsock
// throughput under nested virtualization: a 9P read costed about 4.5
// interrupts, 2 of them for tx. So drainTx signals tx only once
// txSignalAfter has passed since the first unsignalled push or a
// quarter of the ring waits; a later signal checks used_event for every
// push since the last one (Queue.NeedInterrupt), so one the guest has
// already seen through an rx interrupt is not repeated.
const txSignalAfter = 250 * time.Millisecond

// txSignal is the tx queue's deferred notification (tx goroutine only).
type txSignal struct {
	unsignalled int       // chains pushed since the last SignalUsed
	since       time.Time // when the first of them was pushed
}

// drainTx handles every chain on the tx queue (virtio.Transport.DrainSignal),
// signalling the driver as the comment above says. It runs between
// Transport.Begin and End.
func (d *Device) drainTx() bool {
	return d.t.DrainSignal(d.t.Queue(txQueue), func(ch *virtio.Chain) uint32 {
		n := d.handleTx(ch)
		if d.tx.unsignalled++; d.tx.unsignalled == 1 {
			d.tx.since = time.Now()
			time.AfterFunc(txSignalAfter, d.txKick.Kick)
		}
		return n
	}, d.signalTx)
}

// signalTx signals the tx queue's used buffers once a quarter of the ring
// or txSignalAfter's worth of them waits.
func (d *Device) signalTx(q *virtio.Queue) {
	if d.tx.unsignalled >= int(q.Size/4) || d.tx.unsignalled > 0 && time.Since(d.tx.since) >= txSignalAfter {
		d.t.SignalUsed(q)
		d.tx.unsignalled = 0
	}
}
