// Package p9 is a virtio-9p transport device (virtio 1.x §5.11, Linux
// net/9p/trans_virtio.c): the guest mounts with
//
//	mount -t 9p -o trans=virtio,version=9p2000.L,msize=N <tag> /dir
//
// and every 9P request travels as one descriptor chain that also holds
// the room for its reply. The device does not interpret 9P beyond the
// frame header, but for Tclunk: it copies each request to a unix socket
// (a 9P server elsewhere, the daemon's world server) and each reply from
// it into the chain of the request with the same tag. A Tclunk it
// answers itself where the server has agreed to finish each clunk before
// it reads the next request (clunk.go).
//
//	chain:  [ readable: size[4] type[1] tag[2] body... ][ writable: reply ]
//	          |                                          ^
//	          v  copied (size bytes)                     | copied, used.len = size
//	socket: request frames ------------------> server --+ reply frames
//
// Everything from the guest is hostile: a request's size must be at least
// 7, at most Config.MaxMsg and within the chain's readable part; a tag
// already in flight is refused; a reply that does not fit the chain's
// writable part is replaced by Rlerror(EMSGSIZE). Refusals are answered
// by the device itself with Rlerror, so the guest's request ends. Frames
// from the server are bounded by MaxMsg too; a bad one ends the session.
//
// Sessions. The device dials Config.Socket when the guest sends Tversion
// (each mount begins with one) and a later Tversion starts a new
// session. Requests outside a session, and those in flight when it ends
// (the server closed, a restore from a snapshot, a driver reset), are
// answered Rlerror(EIO): the guest's mount fails as a 9P mount over a
// broken connection does, and mounting again starts a new session.
//
// Flush. The server answers Tflush after the flushed request and may not
// answer the latter at all (9P: after Rflush its tag is free); the chain
// of a flushed request still unanswered at Rflush is returned with
// Rlerror(EINTR) first, so no chain stays with the device.
//
// Threads: the vCPU thread that takes the guest's notify pops chains and
// writes small requests to the socket itself when that cannot block
// (inline.go); else a device goroutine pops chains, copies requests out
// and writes them (outside the pause gate), dialing at a Tversion. A
// reader goroutine per session copies replies in. Lock order:
// Device.sendMu → Transport.work (Begin) → Device.mu.
package p9
