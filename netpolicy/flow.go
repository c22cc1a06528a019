package netpolicy

import (
	"encoding/binary"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// FlowsMax is how many TCP connections a filter tracks at once
// (FLOWS_MAX in bpf/flow.h); an allowed SYN past it is counted
// CountUntracked.
const FlowsMax = 4096

// flowKeySize and flowValueSize are sizeof(struct flow_key) and
// sizeof(struct flow) in bpf/flow.h.
const (
	flowKeySize   = 24
	flowValueSize = 48
)

// flowValue is struct flow of bpf/flow.h: one CPU's share of a
// connection's totals (the map is per CPU).
type flowValue struct {
	First, Last, Out, In uint64 // bpf_ktime_get_coarse_ns; bytes
	FinOut, FinIn, Rst   uint32
	_                    uint32
}

// flowLinger is how long after its last packet a closed or reset
// connection is reported: the last ACK after the FINs is counted too.
const flowLinger = time.Second

// Flow is one allowed TCP connection's totals (struct flow in
// bpf/flow.h), reported once when it has ended.
type Flow struct {
	Start, Last time.Time // its SYN; its latest packet
	Dst         netip.Addr
	Port        uint16 // the far end's
	GuestPort   uint16
	Out, In     uint64 // bytes the guest sent; bytes it was sent
	// End is how it ended: "closed" (a FIN each way), "aborted" (a
	// RST), "idle" (no packet for the idle time: later ones are not
	// counted) or "open" (still open when the filter went).
	End string
}

// decodeFlow decodes a key and its CPUs' values, summed (the earliest
// first, the latest last); boot is the wall time of CLOCK_MONOTONIC's
// zero.
func decodeFlow(k []byte, vs []flowValue, boot time.Time) (Flow, bool) {
	if len(k) != flowKeySize {
		return Flow{}, false
	}
	var sum flowValue
	for _, v := range vs {
		if v.First != 0 && (sum.First == 0 || v.First < sum.First) {
			sum.First = v.First
		}
		sum.Last = max(sum.Last, v.Last)
		sum.Out, sum.In = sum.Out+v.Out, sum.In+v.In
		sum.FinOut, sum.FinIn, sum.Rst = sum.FinOut+v.FinOut, sum.FinIn+v.FinIn, sum.Rst+v.Rst
	}
	be := binary.BigEndian // ports in network order
	fl := Flow{
		GuestPort: be.Uint16(k[16:]),
		Port:      be.Uint16(k[18:]),
		Start:     boot.Add(time.Duration(sum.First)),
		Last:      boot.Add(time.Duration(sum.Last)),
		Out:       sum.Out,
		In:        sum.In,
	}
	switch k[20] {
	case 4:
		fl.Dst = netip.AddrFrom4([4]byte(k[0:4]))
	case 6:
		fl.Dst = netip.AddrFrom16([16]byte(k[0:16]))
	default:
		return Flow{}, false
	}
	switch {
	case sum.Rst > 0:
		fl.End = "aborted"
	case sum.FinOut > 0 && sum.FinIn > 0:
		fl.End = "closed"
	}
	return fl, true
}

// monoBoot is the wall time of CLOCK_MONOTONIC's zero (the program's
// bpf_ktime_get_ns; its coarse clock lags it by less than a tick).
func monoBoot() time.Time {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Now().Add(-time.Duration(ts.Nano()))
}

// EndedFlows returns the connections that have ended (closed or aborted
// a second ago or more, or idle for idle) and deletes them from the
// map, so each is reported once; all: every connection (the machine
// has ended; those not ended say "open").
func (f *Filter) EndedFlows(idle time.Duration, all bool) ([]Flow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, msg.Errorf(unix.EBADF, "netpolicy: flows: filter closed")
	}
	boot, now := monoBoot(), time.Now()
	var out []Flow
	var keys [][]byte
	var k []byte
	var v []flowValue
	it := f.objs.Flows.Iterate()
	for it.Next(&k, &v) {
		fl, ok := decodeFlow(k, v, boot)
		if !ok {
			continue
		}
		quiet := now.Sub(fl.Last)
		switch {
		case fl.End != "" && quiet >= flowLinger:
		case quiet >= idle:
			fl.End = "idle"
		case all:
			if fl.End == "" {
				fl.End = "open"
			}
		default:
			continue
		}
		out = append(out, fl)
		keys = append(keys, append([]byte(nil), k...))
	}
	if err := it.Err(); err != nil {
		return out, msg.Errorf(msg.Errno(err), "netpolicy: flows: %v", err)
	}
	for _, k := range keys {
		f.objs.Flows.Delete(k) // gone already: nothing to do
	}
	return out, nil
}
