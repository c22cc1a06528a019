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
//     If the guest answers RST, the client is disconnected. The client's
//     side of this handshake is package hybrid (hybrid.Dial).
//
// Flow control is the spec's credit scheme, both ways: the VMM advertises
// bufAlloc bytes per connection and its fwd_cnt (bytes written to the
// unix socket), and sends guest data only within the guest's advertised
// buf_alloc - (tx_cnt - fwd_cnt). Its fwd_cnt rides on every packet to
// the guest; a CREDIT_UPDATE of its own goes out only when the guest's
// view of the credit falls below one packet (needCreditUpdate).
//
// Interrupts are what moving bytes costs a guest under nested
// virtualization (each is an InterruptStatus read, an ACK write and an
// EOI, exits all), so the used-buffer notifications of the tx queue are
// deferred to the next rx interrupt, which covers every queue of the
// device (drainTx). With both, a 9P read of 128 KiB costs the guest 1.4
// interrupts and 5.5 exits to the VMM, down from 4.5 and 11.2
// (docs/filesystem.md, "Guest binds: tests and figures").
//
// Goroutines: tx (guest packets), rx (packets to the guest: control first,
// then connection data round-robin), event (TRANSPORT_RESET after a
// restore), the listener's accept loop, and per connection a reader (unix
// → rx buffer) and a writer (guest data → unix). Lock order:
// Transport.work → Device.mu; no I/O on a unix socket is done under mu.
//
// Files: vsock.go is the device (its queues, New, Reset, Close); tx.go
// the packets from the guest, rx.go the packets to it (control first,
// then data) and the TRANSPORT_RESET event; conn.go a connection, its
// state and its credit; host.go the unix-socket side (the listener, the
// dial to "<uds>_<port>", and each connection's reader and writer).
package vsock
