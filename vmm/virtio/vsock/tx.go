package vsock

import (
	"io"
	"log/slog"

	"sandfs/vmm/virtio"
)

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
