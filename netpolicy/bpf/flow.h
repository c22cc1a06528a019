// SPDX-License-Identifier: GPL-2.0
//
// flow.h: per-connection byte totals for egress.c (docs/network.md, "The
// audit stream"). An allowed TCP SYN from the guest makes an entry in
// flows; every later TCP packet of that connection adds its length, the
// guest's to out (egress, on the tap's ingress) and its peer's to in
// (reply, on the tap's egress: the packets to the guest), and counts
// FINs and RSTs. The daemon reads the map each second, reports a connection
// that has ended (FIN both ways, a RST, or idle) as an audit line and
// deletes its entry. Nothing else creates entries, so a packet after
// that is not counted. A full map counts COUNT_UNTRACKED instead.
//
// The map is per CPU: each CPU adds to its own copy of a connection's
// entry (the guest's packets and its peer's are handled on different
// CPUs), with no atomic and no cache line shared between them; the
// daemon sums the copies. Times are bpf_ktime_get_coarse_ns (the tick's
// CLOCK_MONOTONIC, no clock read per packet).

// flow_key: one connection as the guest sees it (decoded by Go's
// decodeFlow, netpolicy/flow.go). addr is the far end (IPv4: the first 4 bytes); ports in
// network order.
struct flow_key {
	__u8 addr[16];
	__u16 gport; // the guest's port
	__u16 port;  // the far end's port
	__u8 family; // 4 or 6
	__u8 proto;  // IPPROTO_TCP
	__u8 pad[2];
};

// flow: one CPU's share of its totals (mirrored by Go's flowValue).
// Lengths are skb->len (the Ethernet frame without its FCS), as in
// struct event.
struct flow {
	__u64 first; // bpf_ktime_get_coarse_ns of the SYN (0: not on this CPU)
	__u64 last;  // of the latest packet
	__u64 out;   // bytes the guest sent
	__u64 in;    // bytes the guest was sent
	__u32 fin_out; // FINs the guest sent
	__u32 fin_in;  // FINs its peer sent
	__u32 rst;     // RSTs either sent
	__u32 pad;
};

// FLOWS_MAX: connections tracked at once (mirrored by Go's FlowsMax).
#define FLOWS_MAX 4096

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow);
	__uint(max_entries, FLOWS_MAX);
} flows SEC(".maps");

// flow_add adds len bytes and t's flags to k's entry (out: the guest's
// direction), if it has one.
static __always_inline void flow_add(struct flow_key *k, const struct tcphdr *t, __u32 len, int out)
{
	struct flow *f = bpf_map_lookup_elem(&flows, k);
	if (!f)
		return;
	// This CPU's copy: plain adds (a tc program runs to its end on one
	// CPU, with preemption off).
	if (out)
		f->out += len;
	else
		f->in += len;
	f->last = bpf_ktime_get_coarse_ns();
	if (t->fin) {
		if (out)
			f->fin_out++;
		else
			f->fin_in++;
	}
	if (t->rst)
		f->rst++;
}

// flow_out accounts an allowed TCP packet from the guest: a SYN makes
// the entry (a retransmitted SYN adds to it), any other adds to one.
static __always_inline void flow_out(struct __sk_buff *skb, __u8 family, const void *addr, int alen, const struct tcphdr *t, int syn)
{
	struct flow_key k;
	__builtin_memset(&k, 0, sizeof(k));
	if (alen == 4)
		__builtin_memcpy(k.addr, addr, 4);
	else
		__builtin_memcpy(k.addr, addr, 16);
	k.gport = t->source;
	k.port = t->dest;
	k.family = family;
	k.proto = IPPROTO_TCP;
	if (syn) {
		__u64 now = bpf_ktime_get_coarse_ns();
		struct flow v = {.first = now, .last = now, .out = skb->len};
		long err = bpf_map_update_elem(&flows, &k, &v, BPF_NOEXIST);
		if (err == 0)
			return;
		if (err != -17) { // EEXIST: a retransmitted SYN, added below
			count(COUNT_UNTRACKED);
			return;
		}
	}
	flow_add(&k, t, skb->len, 1);
}

// reply_hdrs: the headers reply reads with bpf_skb_load_bytes (no pull:
// the packets to the guest are often clones).
struct reply_hdrs {
	struct ethhdr eth;
	union {
		struct iphdr v4;
		struct ipv6hdr v6;
	} ip;
};

// reply accounts the packets to the guest: on the tap's egress, it only
// counts and always passes (the policy judges the guest's packets).
SEC("tc")
int reply(struct __sk_buff *skb)
{
	struct reply_hdrs h;
	struct tcphdr t;
	struct flow_key k;
	__u32 off = sizeof(h.eth);

	if (bpf_skb_load_bytes(skb, 0, &h.eth, sizeof(h.eth)))
		return TC_ACT_OK;
	__builtin_memset(&k, 0, sizeof(k));
	if (h.eth.h_proto == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, off, &h.ip.v4, sizeof(h.ip.v4)) ||
		    h.ip.v4.protocol != IPPROTO_TCP || (h.ip.v4.frag_off & bpf_htons(0x1fff)))
			return TC_ACT_OK;
		off += h.ip.v4.ihl * 4;
		__builtin_memcpy(k.addr, &h.ip.v4.saddr, 4);
		k.family = 4;
	} else if (h.eth.h_proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, off, &h.ip.v6, sizeof(h.ip.v6)) || h.ip.v6.nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		off += sizeof(h.ip.v6);
		__builtin_memcpy(k.addr, &h.ip.v6.saddr, 16);
		k.family = 6;
	} else {
		return TC_ACT_OK;
	}
	if (bpf_skb_load_bytes(skb, off, &t, sizeof(t)))
		return TC_ACT_OK;
	k.gport = t.dest;
	k.port = t.source;
	k.proto = IPPROTO_TCP;
	flow_add(&k, &t, skb->len, 0);
	return TC_ACT_OK;
}
