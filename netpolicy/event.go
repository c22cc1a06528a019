package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// Event is one audit record of the program (struct event in
// bpf/egress.c): a TCP SYN, allowed or answered with a reset, or another
// denied IP packet.
type Event struct {
	Time    time.Time
	Proto   uint8 // IPPROTO_*
	Dst     netip.Addr
	Port    uint16 // TCP or UDP destination port, 0 otherwise
	Verdict string // "allow", "reset" or "drop"
	Len     uint32 // the packet's length in bytes
}

// eventSize is sizeof(struct event).
const eventSize = 40

// ProtoName is the protocol's name in audit lines: tcp, udp, icmp,
// icmp6, or its number.
func ProtoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmp6"
	}
	return fmt.Sprint(p)
}

// decodeEvent decodes one record; boot is the wall time of
// CLOCK_MONOTONIC's zero.
func decodeEvent(b []byte, boot time.Time) (Event, error) {
	if len(b) < eventSize {
		return Event{}, fmt.Errorf("event of %d bytes", len(b))
	}
	le := binary.LittleEndian // bpfel
	e := Event{
		Time:  boot.Add(time.Duration(le.Uint64(b[0:]))),
		Len:   le.Uint32(b[8:]),
		Port:  le.Uint16(b[12:]),
		Proto: b[15],
	}
	switch b[14] {
	case 4:
		e.Dst = netip.AddrFrom4([4]byte(b[24:28]))
	case 6:
		e.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	default:
		return Event{}, fmt.Errorf("event of family %d", b[14])
	}
	switch b[16] {
	case 0:
		e.Verdict = "drop"
	case 1:
		e.Verdict = "allow"
	case 2:
		e.Verdict = "reset"
	default:
		return Event{}, fmt.Errorf("event verdict %d", b[16])
	}
	return e, nil
}

// idleEvery is how long ReadEvents waits for an event before it calls
// idle.
const idleEvery = time.Second

// ReadEvents calls fn with each event of the program's ring buffer until
// the filter is closed or released (then it returns nil), and idle (if
// not nil) after each second without one, so that the caller can report
// the events the program did not send (Counters: CountSuppressed,
// CountLost) when a flood has ended. One reader at a time.
func (f *Filter) ReadEvents(fn func(Event), idle func()) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return msg.Errorf(unix.EBADF, "netpolicy: events: filter closed")
	}
	rd, err := ringbuf.NewReader(f.objs.Events)
	if err != nil {
		f.mu.Unlock()
		return msg.Errorf(msg.Errno(err), "netpolicy: events: %v", err)
	}
	f.events = rd
	f.mu.Unlock()
	boot := monoBoot()
	for {
		rd.SetDeadline(time.Now().Add(idleEvery))
		rec, err := rd.Read()
		if errors.Is(err, ringbuf.ErrClosed) {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if idle != nil {
				idle()
			}
			continue
		}
		if err != nil {
			return msg.Errorf(msg.Errno(err), "netpolicy: events: %v", err)
		}
		if e, err := decodeEvent(rec.RawSample, boot); err == nil {
			fn(e)
		}
	}
}

// closeEvents ends ReadEvents. mu held.
func (f *Filter) closeEvents() {
	if f.events != nil {
		f.events.Close()
		f.events = nil
	}
}
