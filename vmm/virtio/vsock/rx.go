package vsock

import (
	"log/slog"
	"time"

	"sandfs/vmm/virtio"
)

// Packets to the guest. Control packets wait in Device.ctrl and go first;
// then each connection in turn sends host data within the guest's credit
// (conn.go). fillRx runs on the rx queue's goroutine, sendEvents on the
// event queue's.

// ctrlPkt is a packet without payload (RESPONSE, RST, CREDIT_UPDATE…)
// waiting in Device.ctrl for an RX buffer; it goes out before any data.
type ctrlPkt struct {
	key
	op    uint16
	flags uint32
}

// queueRST queues an RST to the guest for k; queueRSTLocked is the same
// with d.mu held.
func (d *Device) queueRST(k key) {
	d.mu.Lock()
	d.queueRSTLocked(k)
	d.mu.Unlock()
}

func (d *Device) queueRSTLocked(k key) { d.queueCtrlLocked(k, opRST, 0) }

// queueCtrlLocked queues a control packet and kicks the rx work; past
// maxCtrl waiting packets an RST is dropped (see maxCtrl).
func (d *Device) queueCtrlLocked(k key, op uint16, flags uint32) {
	if len(d.ctrl) >= maxCtrl && op == opRST {
		return
	}
	d.ctrl = append(d.ctrl, ctrlPkt{k, op, flags})
	d.rxKick.Kick()
}

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
	if d.nextCtrlLocked(&h) {
		return h, nil, true
	}
	payload, ok = d.nextDataLocked(&h, room)
	return h, payload, ok
}

// nextCtrlLocked fills h with the first queued control packet whose
// connection is still there (an RST goes out regardless).
func (d *Device) nextCtrlLocked(h *hdr) bool {
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
		return true
	}
	return false
}

// nextDataLocked fills h with the next connection's turn, round-robin:
// host data within the guest's credit (at most room bytes), a
// CREDIT_REQUEST when the credit is used up, or SHUTDOWN once the host
// side has ended and all its data went out.
func (d *Device) nextDataLocked(h *hdr, room int) (payload []byte, ok bool) {
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
					return nil, true
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
			return payload, true
		}
		if c.hostEOF && !c.sentShutdown {
			c.sentShutdown = true
			h.Op, h.Flags = opShutdown, shutSend
			c.lastFwdSent = c.fwdCnt
			d.maybeFinishLocked(c)
			return nil, true
		}
	}
	return nil, false
}

// holdLocked reports whether packets to the guest must wait for a
// TRANSPORT_RESET to be handled; while they do, it re-kicks the rx
// goroutine shortly (the guest does not notify for the event buffer it
// puts back).
func (d *Device) holdLocked() bool {
	if !d.resetEvent && !d.resetInFlight {
		return false
	}
	if q := d.t.Queue(evQueue); !q.Live() || d.resetInFlight && q.AvailIdx() != d.evMark {
		d.resetEvent, d.resetInFlight = false, false
		return false
	}
	poll := resetPoll
	if d.resetInFlight && time.Since(d.resetSent) > resetSlow {
		poll = resetSlowPoll
		if time.Since(d.resetNudged) > resetSlow {
			if d.resetNudged.IsZero() {
				slog.Warn("vsock: the guest has not handled TRANSPORT_RESET; interrupting it again each second", "after", time.Since(d.resetSent).Round(time.Millisecond))
			}
			d.resetNudged = time.Now()
			d.t.Interrupt(virtio.IntUsedBuffer)
		}
	}
	time.AfterFunc(poll, d.rxKick.Kick)
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
	d.resetSent, d.resetNudged = time.Now(), time.Time{}
	d.mu.Unlock()
	q.Push(ch.Head, ch.Written())
	d.t.SignalUsed(q)
	return true
}
