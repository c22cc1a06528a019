// SPDX-License-Identifier: GPL-2.0
//
// egress.c: a sandbox's egress policy, a tc classifier (direct action) on
// the ingress of the host side of its tap or veth, which is where the
// guest's packets arrive. See docs/network.md ("The program").
//
//   ARP, and IPv6 neighbour discovery (ICMPv6 133-136, hop limit 255, to a
//   link-local or link-scope multicast address): pass
//   IPv4/IPv6: the destination is looked up in four LPM tries
//     allow4/deny4 (IPv4), allow6/deny6 (IPv6); a value is the rule's
//     prefix length. Longest prefix wins; deny wins at equal length; no
//     match takes the default. Each trie holds two generations of rules
//     (a key's first data byte); config.word names the one in force and
//     its default, so a new policy is written beside the old one and
//     takes effect with one store to config.
//   denied TCP SYN (no ACK, first fragment, no IPv4 options): rewritten in
//     place into a RST|ACK to the sender and redirected out of the same
//     device (bpf_redirect to skb->ifindex egress): connect() fails at once
//   anything else denied, and every other ethertype: dropped
//
// counters (per CPU, index = enum counter) count packets per verdict.
// flows (flow.h) holds each allowed TCP connection's byte totals, counted
// here and, for the packets to the guest, by reply on the tap's egress.
// events (a ring buffer) gets one struct event per TCP SYN, allowed or
// denied, and per other denied IP packet, at most EVENTS_PER_SEC a second
// after a burst of EVENTS_BURST (a token bucket in limit: a guest cannot
// flood the audit stream); an event over the limit is counted
// COUNT_SUPPRESSED, one a full ring did not take COUNT_LOST.
// Built with Debian's clang by bpf2go (netpolicy/gen.go, make bpf).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/icmpv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "GPL";

// counter: index into counters (mirrored by Go's Counter constants).
enum counter {
	COUNT_ALLOW = 0, // IP packet allowed
	COUNT_DROP,      // IP packet denied and dropped
	COUNT_RESET,     // TCP SYN denied and answered with a RST
	COUNT_NEIGH,     // ARP or IPv6 neighbour discovery passed
	COUNT_OTHER,     // other ethertype or malformed header, dropped
	COUNT_LOST,      // an event the full ring buffer did not take
	COUNT_SUPPRESSED, // an event over the rate limit, not sent
	COUNT_UNTRACKED, // an allowed TCP SYN the full flows map did not take
	COUNT_MAX,
};

// event: one audit record (mirrored by Go's Event). verdict: 0 dropped,
// 1 allowed, 2 reset. addr is the destination (IPv4: the first 4 bytes).
struct event {
	__u64 ns;    // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u32 len;   // the packet's length (skb->len)
	__u16 dport; // host order; 0 if not TCP or UDP
	__u8 family; // 4 or 6
	__u8 proto;  // IPPROTO_*
	__u8 verdict;
	__u8 pad[7];
	__u8 addr[16];
};

#define EVENT_DROP 0
#define EVENT_ALLOW 1
#define EVENT_RESET 2

// EVENTS_BYTES: the ring's size (a power of two, pages).
#define EVENTS_BYTES (256 * 1024)

// EVENTS_PER_SEC, EVENTS_BURST: the audit events' token bucket (mirrored
// by Go's EventsPerSec, EventsBurst). The bucket holds credit in
// nanoseconds: an event costs EVENT_NS, the credit grows with time up to
// BURST_NS.
#define EVENTS_PER_SEC 100
#define EVENTS_BURST 500
#define EVENT_NS (1000000000ULL / EVENTS_PER_SEC)
#define BURST_NS (EVENTS_BURST * EVENT_NS)

// limit: the bucket, one entry shared by every CPU (under lock).
struct limit {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 credit; // nanoseconds' worth of events
	__u64 last;   // bpf_ktime_get_ns of the last take; 0: never
};

// lpm4_key, lpm6_key: prefixlen counts gen's 8 bits too.
struct lpm4_key {
	__u32 prefixlen;
	__u8 gen;
	__u8 addr[4];
};

struct lpm6_key {
	__u32 prefixlen;
	__u8 gen;
	__u8 addr[16];
};

// config: one entry, read once per packet; word is CONFIG_ALLOW (the
// default is allow) | CONFIG_GEN (generation 1 of the rules is in force).
struct config {
	__u32 word;
};

#define CONFIG_ALLOW 1
#define CONFIG_GEN 2

// RULES_MAX rules per generation.
#define RULES_MAX 4096

#define LPM_MAP(name, keytype)                     \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE); \
		__type(key, struct keytype);       \
		__type(value, __u32);              \
		__uint(max_entries, 2 * RULES_MAX); \
		__uint(map_flags, BPF_F_NO_PREALLOC); \
	} name SEC(".maps")

LPM_MAP(allow4, lpm4_key);
LPM_MAP(deny4, lpm4_key);
LPM_MAP(allow6, lpm6_key);
LPM_MAP(deny6, lpm6_key);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct config);
	__uint(max_entries, 1);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, COUNT_MAX);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct limit);
	__uint(max_entries, 1);
} limit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENTS_BYTES);
} events SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

#include "flow.h"

// take_token takes one event's credit from limit at time now; 0: none
// left (the event is suppressed).
static __always_inline int take_token(__u64 now)
{
	__u32 zero = 0;
	struct limit *l = bpf_map_lookup_elem(&limit, &zero);
	if (!l)
		return 1;
	int ok = 0;
	bpf_spin_lock(&l->lock);
	__u64 c = l->credit + (now - l->last);
	if (l->last == 0 || c > BURST_NS)
		c = BURST_NS;
	l->last = now;
	if (c >= EVENT_NS) {
		c -= EVENT_NS;
		ok = 1;
	}
	l->credit = c;
	bpf_spin_unlock(&l->lock);
	return ok;
}

// audit sends an event for the packet in skb to addr (alen bytes),
// protocol proto, destination port dport (0: none), unless over the
// rate limit.
static __always_inline void audit(struct __sk_buff *skb, __u8 family, const void *addr, int alen, __u8 proto, __u16 dport, __u8 verdict)
{
	__u64 now = bpf_ktime_get_ns();
	if (!take_token(now)) {
		count(COUNT_SUPPRESSED);
		return;
	}
	struct event e;
	__builtin_memset(&e, 0, sizeof(e));
	e.ns = now;
	e.len = skb->len;
	e.family = family;
	e.proto = proto;
	e.verdict = verdict;
	if (alen == 4)
		__builtin_memcpy(e.addr, addr, 4);
	else
		__builtin_memcpy(e.addr, addr, 16);
	e.dport = dport;
	if (bpf_ringbuf_output(&events, &e, sizeof(e), 0))
		count(COUNT_LOST);
}

// config_word reads config.word once (0 if missing: generation 0, deny).
static __always_inline __u32 config_word(void)
{
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&config, &zero);
	return c ? *(volatile __u32 *)&c->word : 0;
}

// decide: 1 allow, 0 deny, from the matches' prefix lengths (NULL: none)
// and the config word w.
static __always_inline int decide(__u32 *a, __u32 *d, __u32 w)
{
	// Test a and d one at a time: clang would otherwise OR the two
	// pointers, which the verifier refuses.
	if (a) {
		if (!d)
			return 1;
		return *a > *d;
	}
	if (d)
		return 0;
	return (w & CONFIG_ALLOW) != 0;
}

// csum_fold folds a 32-bit one's-complement sum and inverts it.
static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

// sum16 adds n/2 16-bit words at p (n even, a constant).
static __always_inline __u32 sum16(const void *p, int n)
{
	const __u16 *w = p;
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < n / 2; i++)
		s += w[i];
	return s;
}

// reset_tcp fills t as the RST|ACK answering the SYN o carrying seglen
// bytes of sequence space (1 + data).
static __always_inline void reset_tcp(struct tcphdr *t, const struct tcphdr *o, __u32 seglen)
{
	__builtin_memset(t, 0, sizeof(*t));
	t->source = o->dest;
	t->dest = o->source;
	t->ack_seq = bpf_htonl(bpf_ntohl(o->seq) + seglen);
	t->doff = 5;
	t->rst = 1;
	t->ack = 1;
}

// rst4 and rst6 hold the answer's headers; they are stored one by one
// (the ethernet header's 14 bytes would misalign a packed struct).
struct rst4 {
	struct ethhdr eth;
	struct iphdr ip;
	struct tcphdr tcp;
};

struct rst6 {
	struct ethhdr eth;
	struct ipv6hdr ip;
	struct tcphdr tcp;
};

// send_reset trims skb to the answer, writes its headers and sends it
// back out of the device it came in on.
static __always_inline int send_reset(struct __sk_buff *skb, struct ethhdr *eth, void *ip, __u32 iplen, struct tcphdr *tcp)
{
	__u32 off = sizeof(*eth);
	if (bpf_skb_change_tail(skb, off + iplen + sizeof(*tcp), 0) ||
	    bpf_skb_store_bytes(skb, 0, eth, sizeof(*eth), 0) ||
	    bpf_skb_store_bytes(skb, off, ip, iplen, 0) ||
	    bpf_skb_store_bytes(skb, off + iplen, tcp, sizeof(*tcp), 0)) {
		count(COUNT_DROP);
		return TC_ACT_SHOT;
	}
	count(COUNT_RESET);
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline void swap_eth(struct ethhdr *n, const struct ethhdr *o)
{
	__builtin_memcpy(n->h_dest, o->h_source, ETH_ALEN);
	__builtin_memcpy(n->h_source, o->h_dest, ETH_ALEN);
	n->h_proto = o->h_proto;
}

// reset4 turns the IPv4 SYN in skb into its RST and sends it back.
static __always_inline int reset4(struct __sk_buff *skb, struct ethhdr *eth, struct iphdr *ip, struct tcphdr *tcp)
{
	struct rst4 r;
	__u32 data = bpf_ntohs(ip->tot_len) - sizeof(*ip) - tcp->doff * 4;

	__builtin_memset(&r, 0, sizeof(r));
	swap_eth(&r.eth, eth);
	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.tot_len = bpf_htons(sizeof(r.ip) + sizeof(r.tcp));
	r.ip.frag_off = bpf_htons(0x4000); // IP_DF
	r.ip.ttl = 64;
	r.ip.protocol = IPPROTO_TCP;
	r.ip.saddr = ip->daddr;
	r.ip.daddr = ip->saddr;
	reset_tcp(&r.tcp, tcp, 1 + (data < 65536 ? data : 0));
	r.ip.check = csum_fold(sum16(&r.ip, sizeof(r.ip)));
	__u32 s = sum16(&r.ip.saddr, 8) + bpf_htons(IPPROTO_TCP) + bpf_htons(sizeof(r.tcp));
	r.tcp.check = csum_fold(s + sum16(&r.tcp, sizeof(r.tcp)));

	return send_reset(skb, &r.eth, &r.ip, sizeof(r.ip), &r.tcp);
}

// reset6 is reset4 for IPv6.
static __always_inline int reset6(struct __sk_buff *skb, struct ethhdr *eth, struct ipv6hdr *ip, struct tcphdr *tcp)
{
	struct rst6 r;
	__u32 data = bpf_ntohs(ip->payload_len) - tcp->doff * 4;

	__builtin_memset(&r, 0, sizeof(r));
	swap_eth(&r.eth, eth);
	r.ip.version = 6;
	r.ip.payload_len = bpf_htons(sizeof(r.tcp));
	r.ip.nexthdr = IPPROTO_TCP;
	r.ip.hop_limit = 64;
	r.ip.saddr = ip->daddr;
	r.ip.daddr = ip->saddr;
	reset_tcp(&r.tcp, tcp, 1 + (data < 65536 ? data : 0));
	__u32 s = sum16(&r.ip.saddr, 32) + bpf_htons(IPPROTO_TCP) + bpf_htons(sizeof(r.tcp));
	r.tcp.check = csum_fold(s + sum16(&r.tcp, sizeof(r.tcp)));

	return send_reset(skb, &r.eth, &r.ip, sizeof(r.ip), &r.tcp);
}

static __always_inline int is_syn(struct tcphdr *t)
{
	return t->syn && !t->ack && !t->rst;
}

static __always_inline int ipv4(struct __sk_buff *skb, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	if ((void *)(ip + 1) > end || ip->ihl < 5) {
		count(COUNT_OTHER);
		return TC_ACT_SHOT;
	}
	__u32 w = config_word();
	struct lpm4_key k = {.prefixlen = 8 + 32, .gen = (w & CONFIG_GEN) != 0};
	__builtin_memcpy(k.addr, &ip->daddr, 4);
	struct tcphdr *tcp = (void *)(ip + 1);
	int first = !(ip->frag_off & bpf_htons(0x1fff)) && ip->ihl == 5;
	int tcpok = ip->protocol == IPPROTO_TCP && first && (void *)(tcp + 1) <= end;
	int syn = tcpok && is_syn(tcp);
	__u16 dport = 0;
	if (first && (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) && (void *)tcp + 4 <= end)
		dport = bpf_ntohs(tcp->dest);
	if (decide(bpf_map_lookup_elem(&allow4, &k), bpf_map_lookup_elem(&deny4, &k), w)) {
		count(COUNT_ALLOW);
		if (syn)
			audit(skb, 4, &ip->daddr, 4, ip->protocol, dport, EVENT_ALLOW);
		if (tcpok)
			flow_out(skb, 4, &ip->daddr, 4, tcp, syn);
		return TC_ACT_OK;
	}
	if (syn) {
		audit(skb, 4, &ip->daddr, 4, ip->protocol, dport, EVENT_RESET);
		return reset4(skb, eth, ip, tcp);
	}
	audit(skb, 4, &ip->daddr, 4, ip->protocol, dport, EVENT_DROP);
	count(COUNT_DROP);
	return TC_ACT_SHOT;
}

// link_scope: a is link-local unicast (fe80::/10) or link-scope
// multicast (ff02::/16). Neighbour discovery to any other address is
// judged as ordinary traffic: the host would route it, and its options
// could carry data past the policy.
static __always_inline int link_scope(const struct in6_addr *a)
{
	__u8 b0 = a->s6_addr[0], b1 = a->s6_addr[1];
	return (b0 == 0xfe && (b1 & 0xc0) == 0x80) || (b0 == 0xff && b1 == 0x02);
}

static __always_inline int ipv6(struct __sk_buff *skb, void *data, void *end)
{
	struct ethhdr *eth = data;
	struct ipv6hdr *ip = data + sizeof(*eth);
	if ((void *)(ip + 1) > end) {
		count(COUNT_OTHER);
		return TC_ACT_SHOT;
	}
	if (ip->nexthdr == IPPROTO_ICMPV6 && ip->hop_limit == 255 && link_scope(&ip->daddr)) {
		struct icmp6hdr *icmp = (void *)(ip + 1);
		if ((void *)(icmp + 1) <= end &&
		    icmp->icmp6_type >= 133 && icmp->icmp6_type <= 136) {
			count(COUNT_NEIGH);
			return TC_ACT_OK;
		}
	}
	__u32 w = config_word();
	struct lpm6_key k = {.prefixlen = 8 + 128, .gen = (w & CONFIG_GEN) != 0};
	__builtin_memcpy(k.addr, &ip->daddr, 16);
	struct tcphdr *tcp = (void *)(ip + 1);
	int tcpok = ip->nexthdr == IPPROTO_TCP && (void *)(tcp + 1) <= end;
	int syn = tcpok && is_syn(tcp);
	__u16 dport = 0;
	if ((ip->nexthdr == IPPROTO_TCP || ip->nexthdr == IPPROTO_UDP) && (void *)tcp + 4 <= end)
		dport = bpf_ntohs(tcp->dest);
	if (decide(bpf_map_lookup_elem(&allow6, &k), bpf_map_lookup_elem(&deny6, &k), w)) {
		count(COUNT_ALLOW);
		if (syn)
			audit(skb, 6, &ip->daddr, 16, ip->nexthdr, dport, EVENT_ALLOW);
		if (tcpok)
			flow_out(skb, 6, &ip->daddr, 16, tcp, syn);
		return TC_ACT_OK;
	}
	if (syn) {
		audit(skb, 6, &ip->daddr, 16, ip->nexthdr, dport, EVENT_RESET);
		return reset6(skb, eth, ip, tcp);
	}
	audit(skb, 6, &ip->daddr, 16, ip->nexthdr, dport, EVENT_DROP);
	count(COUNT_DROP);
	return TC_ACT_SHOT;
}

// HEADERS_MAX: how much of the packet is pulled into the linear area.
#define HEADERS_MAX (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + sizeof(struct tcphdr))

SEC("tc")
int egress(struct __sk_buff *skb)
{
	__u32 n = skb->len < HEADERS_MAX ? skb->len : HEADERS_MAX;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	// Pull only when the headers are not in the linear data already:
	// bpf_skb_pull_data unclones a cloned skb, a copy per packet.
	if (data + n > end) {
		bpf_skb_pull_data(skb, n);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end) {
		count(COUNT_OTHER);
		return TC_ACT_SHOT;
	}
	switch (eth->h_proto) {
	case bpf_htons(ETH_P_ARP):
		count(COUNT_NEIGH);
		return TC_ACT_OK;
	case bpf_htons(ETH_P_IP):
		return ipv4(skb, data, end);
	case bpf_htons(ETH_P_IPV6):
		return ipv6(skb, data, end);
	}
	count(COUNT_OTHER);
	return TC_ACT_SHOT;
}
