package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sandfs/ctl/msg"
)

// Counter indexes Filter.Counters; the values mirror enum counter in
// bpf/egress.c.
type Counter int

const (
	CountAllow      Counter = iota // IP packets allowed
	CountDrop                      // IP packets denied and dropped
	CountReset                     // TCP SYNs denied and answered with a RST
	CountNeigh                     // ARP and IPv6 neighbour discovery passed
	CountOther                     // other ethertypes and malformed headers, dropped
	CountLost                      // audit events the full ring buffer did not take
	CountSuppressed                // audit events over the rate limit, not sent
	CountUntracked                 // allowed TCP connections the full flows map did not take
	countMax
)

// EventsPerSec and EventsBurst are the audit events' rate limit (a token
// bucket per filter, EVENTS_PER_SEC and EVENTS_BURST in bpf/egress.c):
// a guest flooding denied packets cannot flood the audit stream; the
// events over the limit are counted (CountSuppressed).
const (
	EventsPerSec = 100
	EventsBurst  = 500
)

// filterName names the tc filter (tc filter show dev X ingress).
const filterName = "sandfs-netpolicy"

// Filter is one loaded copy of the egress program with its own maps,
// attached to at most one link. Its zero value is not usable: Load.
type Filter struct {
	objs egressObjects

	mu     sync.Mutex // guards the maps' contents and the fields below
	gen    uint8      // the generation in force (config.word's CONFIG_GEN)
	held   [2]*Policy // what each generation's rules hold; nil: unknown
	h      *netlink.Handle
	link   int             // attached ifindex, 0 if none
	events *ringbuf.Reader // ReadEvents' reader, nil none
	closed bool            // Close or Release called: the maps' descriptors are closed
}

// Load loads the program and empty maps (default deny) into the kernel.
func Load() (*Filter, error) {
	f := &Filter{held: [2]*Policy{{}, {}}} // fresh maps: empty, generation 0, deny
	if err := loadEgressObjects(&f.objs, nil); err != nil {
		return nil, msg.Errorf(msg.Errno(err), "netpolicy: load program: %v", err)
	}
	return f, nil
}

// Attach puts the program on the ingress of link ifindex (the host side
// of a tap or veth: the guest's egress) through h: a clsact qdisc and a
// direct-action BPF filter, and its reply counter (bpf/flow.h) on the
// link's egress. A link that has a clsact qdisc already is refused
// (EEXIST): Close removes the qdisc, so it must be ours.
func (f *Filter) Attach(h *netlink.Handle, ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.link != 0 {
		return msg.Errorf(syscall.EBUSY, "netpolicy: attach: attached to link %d already", f.link)
	}
	q := clsact(ifindex)
	if err := h.QdiscAdd(q); err != nil {
		return msg.Errorf(msg.Errno(err), "netpolicy: attach: add clsact to link %d: %v", ifindex, err)
	}
	for _, flt := range f.bpfFilters(ifindex) {
		if err := h.FilterAdd(flt); err != nil {
			err = msg.Errorf(msg.Errno(err), "netpolicy: attach: add filter to link %d: %v", ifindex, err)
			return errors.Join(err, h.QdiscDel(q))
		}
	}
	f.h, f.link = h, ifindex
	return nil
}

// Take puts the program on link ifindex in place of the filter attached
// there (a previous daemon's Filter, whose maps go on enforcing the
// policy they hold until then): one netlink replace of filter
// sandfs-netpolicy, so no packet passes unjudged (then the reply
// counter's, added if the old one had none). A link without a clsact
// qdisc gets one, as in Attach.
func (f *Filter) Take(h *netlink.Handle, ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.link != 0 {
		return msg.Errorf(syscall.EBUSY, "netpolicy: take: attached to link %d already", f.link)
	}
	if err := h.QdiscAdd(clsact(ifindex)); err != nil && !errors.Is(err, unix.EEXIST) {
		return msg.Errorf(msg.Errno(err), "netpolicy: take: add clsact to link %d: %v", ifindex, err)
	}
	for _, flt := range f.bpfFilters(ifindex) {
		if err := h.FilterReplace(flt); err != nil {
			return msg.Errorf(msg.Errno(err), "netpolicy: take: replace filter on link %d: %v", ifindex, err)
		}
	}
	f.h, f.link = h, ifindex
	return nil
}

// bpfFilters are the program's tc filters on ifindex: the policy on
// its ingress first, then the reply counter on its egress.
func (f *Filter) bpfFilters(ifindex int) []*netlink.BpfFilter {
	flt := func(parent uint32, fd int) *netlink.BpfFilter {
		return &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: ifindex,
				Parent:    parent,
				Handle:    netlink.MakeHandle(0, 1),
				Protocol:  unix.ETH_P_ALL,
				Priority:  1,
			},
			Fd:           fd,
			Name:         filterName,
			DirectAction: true,
		}
	}
	return []*netlink.BpfFilter{flt(netlink.HANDLE_MIN_INGRESS, f.objs.Egress.FD()), flt(netlink.HANDLE_MIN_EGRESS, f.objs.Reply.FD())}
}

func clsact(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: ifindex,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
}

// Close detaches the program (deleting the clsact qdisc deletes its
// filters) and frees the program and maps. A link that is gone already
// (ENODEV, ENOENT: the tap went with its sandbox) is not an error.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeEvents()
	f.closed = true
	var err error
	if f.link != 0 {
		if e := f.h.QdiscDel(clsact(f.link)); e != nil && !errors.Is(e, unix.ENODEV) && !errors.Is(e, unix.ENOENT) && !errors.Is(e, unix.EINVAL) {
			err = msg.Errorf(msg.Errno(e), "netpolicy: detach from link %d: %v", f.link, e)
		}
		f.link = 0
	}
	return errors.Join(err, f.objs.Close())
}

// Counters returns the packets counted per verdict (index: Counter),
// summed over CPUs.
func (f *Filter) Counters() ([]uint64, error) {
	out := make([]uint64, countMax)
	for i := range out {
		var per []uint64
		if err := f.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return nil, msg.Errorf(msg.Errno(err), "netpolicy: counter %d: %v", i, err)
		}
		for _, n := range per {
			out[i] += n
		}
	}
	return out, nil
}

// lpmKey is struct lpm4_key / lpm6_key of bpf/egress.c for generation
// gen: a host-order prefix length counting the generation byte, the
// generation, then the address in network order, then zeros up to the
// struct's size (its padding: the trie ignores bits past prefixlen).
func lpmKey(m *ebpf.Map, gen uint8, p netip.Prefix) []byte {
	a := p.Addr().AsSlice()
	k := make([]byte, max(int(m.KeySize()), 5+len(a)))
	binary.LittleEndian.PutUint32(k, uint32(8+p.Bits())) // bpfel
	k[4] = gen
	copy(k[5:], a)
	return k
}

// config.word's bits (CONFIG_ALLOW, CONFIG_GEN in bpf/egress.c).
const (
	configAllow = 1
	configGen   = 2
)

func (f *Filter) trie(r Rule) *ebpf.Map {
	switch {
	case r.Prefix.Addr().Is4() && r.Verdict == Allow:
		return f.objs.Allow4
	case r.Prefix.Addr().Is4():
		return f.objs.Deny4
	case r.Verdict == Allow:
		return f.objs.Allow6
	}
	return f.objs.Deny6
}

func (f *Filter) put(gen uint8, r Rule) error {
	v := uint32(r.Prefix.Bits())
	if err := f.trie(r).Put(lpmKey(f.trie(r), gen, r.Prefix), v); err != nil {
		return fmt.Errorf("put %s %s: %w", r.Verdict, r.Prefix, err)
	}
	return nil
}

func (f *Filter) del(gen uint8, r Rule) error {
	if err := f.trie(r).Delete(lpmKey(f.trie(r), gen, r.Prefix)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete %s %s: %w", r.Verdict, r.Prefix, err)
	}
	return nil
}

// switchTo puts generation gen in force with default v: one store of
// config.word, which the program reads once per packet.
func (f *Filter) switchTo(gen uint8, v Verdict) error {
	w := uint32(0)
	if v == Allow {
		w |= configAllow
	}
	if gen == 1 {
		w |= configGen
	}
	if err := f.objs.Config.Put(uint32(0), w); err != nil {
		return fmt.Errorf("switch to generation %d: %w", gen, err)
	}
	return nil
}

// Release frees this process's hold on the program and maps and leaves
// the filter attached: the kernel keeps both while the filter uses them,
// so the link stays under the policy in force (a daemon that exits while
// its sandboxes run on; the next one Takes the link over).
func (f *Filter) Release() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeEvents()
	f.closed = true
	f.link = 0
	return f.objs.Close()
}
