package p9

import (
	"fmt"
	"sync/atomic"
	"time"

	"sandfs/vmm/virtio"
)

// stats splits a request's time inside the VMM, for the SIGUSR1 dump
// (virtio.DebugEnv), as sums (a reader divides by the counts):
//
//	guest notify ─kick→pop─▶ device goroutine ─popped→sent─▶ socket
//	   (vCPU thread)           (takes the chain)   (incl. write: the writev)
//	socket ─popped→reply─▶ reader goroutine ─reply→pushed─▶ used ring, irq
//
// kick→pop is the hand-off from the vCPU thread that took the guest's
// notify to the device goroutine, counted once per wake-up that found
// chains. What the guest measures beyond kick→pushed is its own side:
// the notify's exit, the interrupt and its 9p client.
type stats struct {
	requests, replies atomic.Uint64
	inline            atomic.Uint64 // requests written by the vCPU thread (sendNow)
	directReplies     atomic.Uint64 // replies copied from the socket straight into guest memory
	passedReplies     atomic.Uint64 // reads the device made itself from a passed descriptor (passed.go)
	earlyClunks       atomic.Uint64 // clunks the device answered itself (clunk.go); their server replies are not in replies
	lookupAttrs       atomic.Uint64 // Tgetattrs answered with a lookup's attributes (walkattr.go)
	passedFiles       atomic.Uint64 // opens whose descriptor the server passed (passfile.go)
	local             atomic.Uint64 // reads, writes and fsyncs the device answered on a passed file
	replyBytes        atomic.Uint64
	kicks             atomic.Uint64 // wake-ups by a notify that found chains
	toPop             atomic.Int64  // ns, notify → first chain popped, summed over kicks
	toSent            atomic.Int64  // ns, popped → written, summed over requests
	inWrite           atomic.Int64  // ns, in the socket writes, summed over writes
	toReply           atomic.Int64  // ns, popped → reply read
	toPush            atomic.Int64  // ns, reply read → pushed
	kicked            atomic.Int64  // unix ns of the last notify not yet counted, 0 if none
}

// notified records a notify's time (the vCPU thread).
func (s *stats) notified() { s.kicked.Store(time.Now().UnixNano()) }

// popped counts the hand-off of the last notify, if not counted yet.
func (s *stats) popped(now time.Time) {
	if k := s.kicked.Swap(0); k != 0 {
		s.kicks.Add(1)
		s.toPop.Add(now.UnixNano() - k)
	}
}

func (s *stats) sent(n int, d, write time.Duration) {
	s.requests.Add(uint64(n))
	s.toSent.Add(int64(d) * int64(n))
	s.inWrite.Add(int64(write))
}

func (s *stats) replied(server, push time.Duration, n int) {
	s.replies.Add(1)
	s.replyBytes.Add(uint64(n))
	s.toReply.Add(int64(server))
	s.toPush.Add(int64(push))
}

// DebugState implements virtio.DebugStater: the session and the sums
// above, one line (test/guestlab BenchmarkWorldHops parses it).
func (d *Device) DebugState() string {
	s := &d.stats
	open, pending := "?", "?"
	if virtio.LockForDump(&d.mu) {
		open, pending = fmt.Sprint(d.open), fmt.Sprint(len(d.pending))
		d.mu.Unlock()
	}
	return fmt.Sprintf("  9p: open=%s pending=%s requests=%d replies=%d inline=%d direct=%d passed=%d replyBytes=%d sentNs=%d replyNs=%d pushNs=%d kicks=%d kickNs=%d writeNs=%d early=%d attrs=%d files=%d local=%d\n",
		open, pending, s.requests.Load(), s.replies.Load(), s.inline.Load(), s.directReplies.Load(), s.passedReplies.Load(), s.replyBytes.Load(),
		s.toSent.Load(), s.toReply.Load(), s.toPush.Load(), s.kicks.Load(), s.toPop.Load(), s.inWrite.Load(), s.earlyClunks.Load(), s.lookupAttrs.Load(), s.passedFiles.Load(), s.local.Load())
}
