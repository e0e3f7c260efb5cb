// SPDX-License-Identifier: GPL-2.0
/* steer's XDP program: redirects only the traffic steer owns (protocol +
 * destination port, listed at run time in `owned_ports`) to the AF_XDP socket
 * of the receiving queue (or the one `flow_socks` names for the flow), and
 * passes everything else (ARP, ICMP, other ports, fragments, IPv6 extension
 * headers, more than two VLAN tags) to the kernel with XDP_PASS. Frames with
 * one 802.1Q tag, or an 802.1ad outer and an 802.1Q inner tag (QinQ), are
 * owned by their inner protocol and port like untagged ones. When the kernel and driver offer
 * bpf_xdp_metadata_rx_hash (built with -DSTEER_RX_HASH, loaded device-bound),
 * the receive hash goes into the metadata area; otherwise the metadata says
 * "no hash". While the engine's flow budget is full, a closed gate drops the
 * first datagram of each flow the engine has not admitted (steer_xdp.h). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "steer_xdp.h"

enum xdp_rss_hash_type { XDP_RSS_TYPE_NONE = 0 };

#ifdef STEER_RX_HASH
/* Resolved to the driver's implementation only for device-bound programs;
 * otherwise the kernel substitutes a stub returning -EOPNOTSUPP. Weak, so the
 * program still loads on kernels without it. */
extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash,
				    enum xdp_rss_hash_type *rss_type) __ksym __weak;
#endif

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct steer_port_key);
	__type(value, __u32);
} owned_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct steer_flow_key);
	__type(value, __u32);
} flow_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SETTING_MAX);
	__type(key, __u32);
	__type(value, __u32);
} settings SEC(".maps");

/* The new-flow gate's maps (steer_xdp.h says how they are used). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, STEER_GATE_ADMIT_SLOTS / 8);
	__type(key, __u32);
	__type(value, __u64);
} admitted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_GATE_SEEN_SLOTS / 2);
	__type(key, __u32);
	__type(value, __u64);
} first_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &stat);
	if (v)
		*v += 1;
}

/* The last 4 bytes of a VLAN tag, after its TPID: the TCI and the
 * EtherType inside. */
struct steer_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* Whether the closed gate lets a packet of `flow` through: its flow is
 * admitted (or shares a slot with one), or it is a retry of a flow dropped
 * here a few epochs ago. Otherwise the flow's slot in `first_seen` now
 * remembers it, so its retry gets through. */
static __always_inline int gate_lets_through(const struct steer_flow_key *flow)
{
	__u32 key = SETTING_GATE_SEED;
	__u32 *seedp = bpf_map_lookup_elem(&settings, &key);
	__u32 h = steer_gate_hash(flow, seedp ? *seedp : 0);
	__u32 slot = h & (STEER_GATE_ADMIT_SLOTS - 1);
	__u32 cell = slot >> 3;
	__u8 *open = bpf_map_lookup_elem(&admitted, &cell);
	if (!open || open[slot & 7])
		return 1;
	/* A second hash of the first picks the slot and fingerprint in
	 * first_seen, so the two tables' collisions are independent. */
	__u32 h2 = steer_gate_fmix(h + 0x9e3779b9);
	__u32 seen = h2 & (STEER_GATE_SEEN_SLOTS - 1);
	cell = seen >> 1;
	__u32 *mark = bpf_map_lookup_elem(&first_seen, &cell);
	if (!mark)
		return 1;
	__u32 epoch = (__u32)(bpf_ktime_get_ns() >> 30) & 0xff;
	__u32 print = (h2 & 0xffffff00) | 0x100;
	__u32 old = mark[seen & 1];
	if ((old & 0xffffff00) == print &&
	    ((epoch - old) & 0xff) < STEER_GATE_RETRY_EPOCHS) {
		count(STAT_GATE_RETRIES);
		return 1;
	}
	mark[seen & 1] = print | epoch;
	return 0;
}

static __always_inline int pass(void)
{
	count(STAT_PASSED);
	return XDP_PASS;
}

/* xdp.frags: the program reads only the headers (in the first buffer),
 * so it handles multi-buffer packets as they are; without it the kernel
 * refuses the program on a device whose MTU does not fit one page. */
SEC("xdp.frags")
int steer_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct steer_flow_key flow = {};
	struct steer_port_key pk = {};
	__u8 *l4;
	void *l3;
	__be16 proto;
	int tags = 0;

	if ((void *)(eth + 1) > data_end)
		return pass();
	proto = eth->h_proto;
	l3 = eth + 1;
	/* Up to two VLAN tags; a third is passed on below. */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct steer_vlan_hdr *vh = l3;
		if ((void *)(vh + 1) > data_end)
			return pass();
		proto = vh->proto;
		l3 = vh + 1;
		tags++;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return pass();
		/* Non-first fragments carry no ports; first fragments are
		 * left to the kernel too: the kernel reassembles, and the
		 * engine's slow-path socket on the owned port gets the whole
		 * datagram. IPv6 fragments (next header 44) pass below, like
		 * every extension header. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return pass();
		l4 = (__u8 *)ip + ip->ihl * 4;
		flow.proto = ip->protocol;
		flow.family = 4;
		__builtin_memcpy(flow.saddr, &ip->saddr, 4);
		__builtin_memcpy(flow.daddr, &ip->daddr, 4);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > data_end)
			return pass();
		l4 = (__u8 *)(ip6 + 1);
		flow.proto = ip6->nexthdr;
		flow.family = 6;
		__builtin_memcpy(flow.saddr, &ip6->saddr, 16);
		__builtin_memcpy(flow.daddr, &ip6->daddr, 16);
	} else {
		return pass();
	}

	if (flow.proto != IPPROTO_UDP && flow.proto != IPPROTO_TCP)
		return pass();
	/* Source and destination ports lead both the UDP and TCP headers. */
	if ((void *)(l4 + 4) > data_end)
		return pass();
	flow.sport = *(__be16 *)l4;
	flow.dport = *(__be16 *)(l4 + 2);

	pk.proto = flow.proto;
	pk.port = flow.dport;
	if (!bpf_map_lookup_elem(&owned_ports, &pk))
		return pass();

	__u32 setting = SETTING_OWNED_ACTION;
	__u32 *owned_action = bpf_map_lookup_elem(&settings, &setting);
	if (owned_action && *owned_action == STEER_OWNED_DROP) {
		count(STAT_DROPPED);
		return XDP_DROP;
	}
	if (owned_action && *owned_action == STEER_OWNED_PASS)
		return pass();

	setting = SETTING_GATE;
	__u32 *gate = bpf_map_lookup_elem(&settings, &setting);
	if (gate && *gate && !gate_lets_through(&flow)) {
		count(STAT_GATE_DROPPED);
		return XDP_DROP;
	}

	__u32 index = ctx->rx_queue_index;
	__u32 *chosen = bpf_map_lookup_elem(&flow_socks, &flow);
	if (chosen) {
		index = *chosen;
		count(STAT_FLOW_HITS);
	}

	/* The receive hash, in the metadata area in front of the packet. */
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct steer_meta)) == 0) {
		struct steer_meta *meta = (void *)(long)ctx->data_meta;
		data = (void *)(long)ctx->data;
		if ((void *)(meta + 1) <= data) {
			meta->rx_hash = 0;
			meta->rx_hash_type = 0;
			meta->flags = STEER_META_MAGIC;
#ifdef STEER_RX_HASH
			__u32 hash = 0;
			enum xdp_rss_hash_type type = XDP_RSS_TYPE_NONE;
			if (bpf_ksym_exists(bpf_xdp_metadata_rx_hash) &&
			    bpf_xdp_metadata_rx_hash(ctx, &hash, &type) == 0) {
				meta->rx_hash = hash;
				meta->rx_hash_type = (__u16)type;
				meta->flags |= STEER_META_HASH;
				count(STAT_HASH_OK);
			}
#endif
		}
	}

	int action = bpf_redirect_map(&xsks_map, index, XDP_PASS);
	if (action == XDP_REDIRECT) {
		count(STAT_REDIRECTED);
		if (tags)
			count(STAT_VLAN);
	} else {
		count(STAT_REDIRECT_FAILED);
	}
	return action;
}

char LICENSE[] SEC("license") = "GPL";
