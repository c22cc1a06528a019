package vsock

import (
	"net"
	"sync"
)

// conn is one connection between a guest port and a unix stream; its
// fields are guarded by Device.mu. Credit (virtio 1.x §5.10.6.3, buffer
// space management): the VMM sends the guest at most peerBufAlloc -
// (txCnt - peerFwdCnt) bytes it has not yet consumed, and its own fwdCnt
// (bytes written to the unix socket) reaches the guest in every packet.
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

// key names a connection by its ports.
type key struct{ local, peer uint32 } // host port, guest port

// connState is where a connection stands; only stEstablished moves data.
type connState int

const (
	stDialing    connState = iota // guest REQUEST, dialing <uds>_<port>
	stConnecting                  // host CONNECT, REQUEST sent, awaiting RESPONSE
	stEstablished
	stClosed
)

// newConnLocked registers a connection in state st (uc is nil while
// dialing).
func (d *Device) newConnLocked(k key, uc *net.UnixConn, st connState) *conn {
	c := &conn{key: k, uc: uc, state: st, cond: sync.NewCond(&d.mu)}
	d.conns[k] = c
	d.order = append(d.order, c)
	return c
}

// updateCreditLocked takes the guest's buf_alloc and fwd_cnt from h; new
// credit wakes the rx work if host data waits.
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

// needCreditUpdate reports whether the guest must hear of the unreported
// bytes written to the unix socket (fwd_cnt - the fwd_cnt last sent) in
// a CREDIT_UPDATE of its own: only when the credit it sees has fallen
// below one full packet, as Linux's own receiver decides
// (virtio_transport_stream_do_dequeue). Otherwise the fwd_cnt rides on
// the next packet to the guest (a 9P reply is followed by the next
// request), and a CREDIT_UPDATE would cost the guest an interrupt per
// quarter of the buffer for nothing. A guest out of credit has
// bufAlloc unreported bytes once they are written, so it always hears.
func needCreditUpdate(unreported uint32) bool {
	return bufAlloc-min(unreported, bufAlloc) < maxPayload
}

// queueCreditUpdateLocked queues a CREDIT_UPDATE unless one is queued.
func (d *Device) queueCreditUpdateLocked(c *conn) {
	if !c.ctrlCreditSent {
		c.ctrlCreditSent = true
		d.queueCtrlLocked(c.key, opCreditUpdate, 0)
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
