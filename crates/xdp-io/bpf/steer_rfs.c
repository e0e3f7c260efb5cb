// SPDX-License-Identifier: GPL-2.0
/* steer's XDP RFS for kernel sockets: frames of the flows steer tracks are
 * redirected into a CPUMAP entry, so the kernel stack of the CPU where the
 * application reads the flow handles them (RFS done in XDP, steered by
 * steer's flow table). Three programs share the maps:
 *
 * - steer_rfs (XDP, on the interface): owned protocol/port? a CPU in
 *   `rfs_desired` for the flow's 4-tuple? then the move rule, then
 *   bpf_redirect_map into `rfs_cpus`. Everything else: XDP_PASS.
 * - steer_rfs_cpu (XDP in a cpumap entry): runs on the target CPU as each
 *   frame leaves the cpumap queue; counts the landing (per CPU) and the
 *   queue's dequeue count for the qtail rule. Returns XDP_PASS: the frame
 *   goes on to GRO and the stack on that CPU.
 * - steer_rfs_sock (socket filter, attached by steer to tracked UDP
 *   sockets): counts the frames that reached the socket.
 *
 * Ordering (RFS_ORDER_SOCKET, the default). A flow leaves the CPU serving it
 * only when nothing of it sent there can still be overtaken:
 * - TCP: the socket's rcv_nxt has reached this segment's sequence number,
 *   so every byte before it was processed in order (looked up with
 *   bpf_skc_lookup_tcp, read through BTF). A segment dropped on the way is
 *   retransmitted along the held path, so the rule cannot wedge.
 * - UDP: the socket filter has seen as many frames as the XDP program.
 * Counting where the cpumap program dequeues (RFS_ORDER_QTAIL, RFS's own
 * last_qtail rule) is not enough: the cpumap kthread runs the program, then
 * hands frames to GRO, which may hold them until its next flush (every 64
 * frames or an empty queue), after the count says they were handled. A move
 * held back longer than RFS_SET_MAX_HOLD is forced and counted (frames
 * lost before reaching the socket would otherwise hold it forever). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "steer_xdp.h"
#include "steer_rfs.h"

/* The one field of the kernel's struct tcp_sock the TCP rule reads; libbpf
 * relocates its offset against the running kernel's BTF. */
/* A load the compiler may neither merge nor tear (clang 14 has no BPF
 * atomic loads). */
#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

struct tcp_sock {
	__u32 rcv_nxt;
} __attribute__((preserve_access_index));

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
	__type(value, struct steer_rfs_desired);
} rfs_desired SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct steer_flow_key);
	__type(value, struct steer_rfs_state);
} rfs_state SEC(".maps");

/* Sized to the possible CPUs by the loader (a cpumap may not exceed
 * NR_CPUS). Values are struct bpf_cpumap_val: queue size + program fd. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} rfs_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_rfs_queue);
} rfs_queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RFS_SET_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rfs_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RFS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rfs_stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&rfs_stats, &stat);
	if (v)
		*v += 1;
}

static __always_inline __u64 setting(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&rfs_settings, &which);
	return v ? *v : 0;
}

/* Whether every byte of the TCP flow before `seq` has been processed by its
 * socket (or there is no full socket to reorder into). */
static __always_inline int tcp_drained(struct xdp_md *ctx,
				       const struct steer_flow_key *flow,
				       __be32 seq)
{
	struct bpf_sock_tuple tuple = {};
	struct bpf_sock *sk;
	struct tcp_sock *tp;
	__u32 size;
	int drained = 1;

	if (flow->family == 4) {
		__builtin_memcpy(&tuple.ipv4.saddr, flow->saddr, 4);
		__builtin_memcpy(&tuple.ipv4.daddr, flow->daddr, 4);
		tuple.ipv4.sport = flow->sport;
		tuple.ipv4.dport = flow->dport;
		size = sizeof(tuple.ipv4);
	} else {
		__builtin_memcpy(tuple.ipv6.saddr, flow->saddr, 16);
		__builtin_memcpy(tuple.ipv6.daddr, flow->daddr, 16);
		tuple.ipv6.sport = flow->sport;
		tuple.ipv6.dport = flow->dport;
		size = sizeof(tuple.ipv6);
	}
	sk = bpf_skc_lookup_tcp(ctx, &tuple, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 1;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp)
		drained = (__s32)(tp->rcv_nxt - bpf_ntohl(seq)) >= 0;
	bpf_sk_release(sk);
	return drained;
}

/* Whether the flow may leave the path serving it now. */
static __always_inline int may_move(struct xdp_md *ctx,
				    const struct steer_flow_key *flow,
				    struct steer_rfs_state *st, __be32 seq,
				    __u64 order)
{
	if (order == RFS_ORDER_NONE)
		return 1;
	if (order == RFS_ORDER_QTAIL) {
		if (st->cpu == STEER_RFS_NO_CPU)
			return 1;
		__u32 cpu = st->cpu;
		struct steer_rfs_queue *q = bpf_map_lookup_elem(&rfs_queues, &cpu);
		return !q || READ_ONCE(q->dequeued) >= st->last_qtail;
	}
	if (flow->proto == IPPROTO_TCP)
		return tcp_drained(ctx, flow, seq);
	/* UDP: the first placement waits for the frames that took the kernel
	 * path before steer counted them to reach the socket. */
	if (st->cpu == STEER_RFS_NO_CPU &&
	    bpf_ktime_get_ns() - st->created < setting(RFS_SET_UDP_SETTLE))
		return 0;
	return READ_ONCE(st->delivered) >= st->seen;
}

/* Parses an Ethernet frame into its flow key; the TCP sequence number goes
 * to *seq. 0 on success. */
static __always_inline int parse(void *data, void *data_end,
				 struct steer_flow_key *flow, __be32 *seq)
{
	struct ethhdr *eth = data;
	__u8 *l4;

	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return -1;
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		l4 = (__u8 *)ip + ip->ihl * 4;
		flow->proto = ip->protocol;
		flow->family = 4;
		__builtin_memcpy(flow->saddr, &ip->saddr, 4);
		__builtin_memcpy(flow->daddr, &ip->daddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		l4 = (__u8 *)(ip6 + 1);
		flow->proto = ip6->nexthdr;
		flow->family = 6;
		__builtin_memcpy(flow->saddr, &ip6->saddr, 16);
		__builtin_memcpy(flow->daddr, &ip6->daddr, 16);
	} else {
		return -1;
	}
	if (flow->proto == IPPROTO_TCP) {
		struct tcphdr *tcp = (void *)l4;
		if ((void *)(tcp + 1) > data_end)
			return -1;
		*seq = tcp->seq;
	} else if (flow->proto == IPPROTO_UDP) {
		if ((void *)(l4 + 4) > data_end)
			return -1;
		*seq = 0;
	} else {
		return -1;
	}
	flow->sport = *(__be16 *)l4;
	flow->dport = *(__be16 *)(l4 + 2);
	return 0;
}

SEC("xdp")
int steer_rfs(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct steer_flow_key flow = {};
	struct steer_port_key pk = {};
	__be32 seq = 0;

	if (parse(data, data_end, &flow, &seq)) {
		count(RFS_STAT_PASSED);
		return XDP_PASS;
	}
	pk.proto = flow.proto;
	pk.port = flow.dport;
	if (!bpf_map_lookup_elem(&owned_ports, &pk)) {
		count(RFS_STAT_PASSED);
		return XDP_PASS;
	}
	struct steer_rfs_state *st = bpf_map_lookup_elem(&rfs_state, &flow);
	struct steer_rfs_desired *want = bpf_map_lookup_elem(&rfs_desired, &flow);
	if (!want || !st) {
		if (st)
			__sync_fetch_and_add(&st->seen, 1);
		count(want ? RFS_STAT_NO_STATE : RFS_STAT_UNTRACKED);
		return XDP_PASS;
	}

	if (st->cpu != want->cpu) {
		__u64 order = setting(RFS_SET_ORDER);
		if (may_move(ctx, &flow, st, seq, order)) {
			st->cpu = want->cpu;
			st->held_since = 0;
			count(RFS_STAT_MOVES);
		} else {
			__u64 now = bpf_ktime_get_ns();
			if (!st->held_since) {
				st->held_since = now;
			} else if (now - st->held_since > setting(RFS_SET_MAX_HOLD)) {
				st->cpu = want->cpu;
				st->held_since = 0;
				count(RFS_STAT_MOVES);
				count(RFS_STAT_FORCED);
			}
			if (st->cpu != want->cpu)
				count(RFS_STAT_HELD_BACK);
		}
	}
	/* Counted after the decision: `seen` covers the frames before this one,
	 * which is what the UDP rule compares `delivered` with. */
	__sync_fetch_and_add(&st->seen, 1);
	if (st->cpu == STEER_RFS_NO_CPU) {
		/* Still on the kernel path, waiting for it to drain. */
		return XDP_PASS;
	}

	__u32 cpu = st->cpu;
	int action = bpf_redirect_map(&rfs_cpus, cpu, XDP_PASS);
	if (action != XDP_REDIRECT) {
		count(RFS_STAT_REDIRECT_FAILED);
		return action;
	}
	struct steer_rfs_queue *q = bpf_map_lookup_elem(&rfs_queues, &cpu);
	if (q)
		st->last_qtail = __sync_fetch_and_add(&q->enqueued, 1) + 1;
	count(RFS_STAT_REDIRECTED);
	return XDP_REDIRECT;
}

SEC("xdp/cpumap")
int steer_rfs_cpu(struct xdp_md *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct steer_rfs_queue *q = bpf_map_lookup_elem(&rfs_queues, &cpu);

	if (q)
		__sync_fetch_and_add(&q->dequeued, 1);
	count(RFS_STAT_LANDED);
	return XDP_PASS;
}

SEC("socket")
int steer_rfs_sock(struct __sk_buff *skb)
{
	struct steer_flow_key flow = {};
	__u8 vhl;
	__u16 ports[2];
	__u32 l4off;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
			return skb->len;
		vhl = ip.ihl;
		l4off = vhl * 4;
		flow.family = 4;
		flow.proto = ip.protocol;
		__builtin_memcpy(flow.saddr, &ip.saddr, 4);
		__builtin_memcpy(flow.daddr, &ip.daddr, 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes_relative(skb, 0, &ip6, sizeof(ip6), BPF_HDR_START_NET))
			return skb->len;
		l4off = sizeof(ip6);
		flow.family = 6;
		flow.proto = ip6.nexthdr;
		__builtin_memcpy(flow.saddr, &ip6.saddr, 16);
		__builtin_memcpy(flow.daddr, &ip6.daddr, 16);
	} else {
		return skb->len;
	}
	if (flow.proto != IPPROTO_UDP)
		return skb->len;
	if (bpf_skb_load_bytes_relative(skb, l4off, ports, sizeof(ports), BPF_HDR_START_NET))
		return skb->len;
	flow.sport = ports[0];
	flow.dport = ports[1];

	struct steer_rfs_state *st = bpf_map_lookup_elem(&rfs_state, &flow);
	if (st) {
		/* A GRO'd datagram train counts as its segments. */
		__u64 segs = skb->gso_segs ? skb->gso_segs : 1;
		/* Never above `seen`: frames that took the kernel path before
		 * steer counted them must not make later ones look delivered. */
		for (int i = 0; i < 4; i++) {
			__u64 have = READ_ONCE(st->delivered);
			__u64 seen = READ_ONCE(st->seen);
			__u64 want = have + segs > seen ? seen : have + segs;
			if (want <= have ||
			    __sync_val_compare_and_swap(&st->delivered, have, want) == have)
				break;
		}
		count(RFS_STAT_DELIVERED);
	}
	return skb->len;
}

char LICENSE[] SEC("license") = "GPL";
