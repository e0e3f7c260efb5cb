// SPDX-License-Identifier: GPL-2.0
/* steer's XDP RFS for kernel sockets: frames of the flows steer tracks are
 * redirected into a CPUMAP entry, so the kernel stack of the CPU where the
 * application reads the flow handles them (RFS done in XDP, steered by
 * steer's flow table). Four programs share the maps:
 *
 * - steer_rfs (XDP, on the interface): owned protocol/port? a CPU in
 *   `rfs_desired` for the flow's 4-tuple? then the move rule, then
 *   bpf_redirect_map into `rfs_cpus`, with the rx CPU in the frame's
 *   metadata. Everything else: XDP_PASS.
 * - steer_rfs_cpu (XDP in each cpumap entry): runs on the entry's CPU as a
 *   frame leaves its queue: counts the dequeue (per rx CPU: the queue's
 *   head for RFS's last_qtail rule), the landing (per CPU) and, for UDP,
 *   the flow's landed frames. Returns XDP_PASS: the frame goes on to GRO
 *   and the stack on that CPU.
 * - steer_rfs_drops (raw tracepoint xdp_cpumap_enqueue) and
 *   steer_rfs_redirect_err (raw tracepoint xdp_redirect_err): frames a
 *   cpumap queue dropped, or that failed to reach it, count as dequeued.
 * - steer_rfs_sock (socket filter, attached by steer to tracked UDP
 *   sockets): counts the frames that reached the socket.
 * - steer_rfs_record (raw tracepoint sock_recv_length, when steer records
 *   in the kernel): an application read a connected TCP socket of an
 *   owned port, or a connected UDP one while UDP is recorded (keyed by
 *   its peer and any local address, as the recvmsg hooks key theirs); the
 *   reading CPU becomes the flow's desired CPU under the LLC rule
 *   (rps_record_sock_flow without the application's help).
 * - steer_rfs_recvmsg4, steer_rfs_recvmsg6 (cgroup recvmsg hooks, when
 *   steer records UDP in the kernel): the same for each UDP datagram an
 *   application of the cgroup reads with its sender's address, the flow
 *   keyed by that sender and any local address (steer_rfs.h).
 * - steer_rfs_ingress (cgroup skb ingress, beside them): the socket
 *   filter's count for those flows, on every socket of the cgroup.
 *
 * Ordering (RFS_ORDER_SOCKET, the default). A flow leaves the path serving
 * it only when nothing of it sent there can be overtaken:
 * - TCP: the socket's rcv_nxt has reached this segment's sequence number,
 *   so every byte before it was processed in order (bpf_skc_lookup_tcp,
 *   rcv_nxt read through BTF). A segment lost on the way is retransmitted
 *   along the held path, so the rule cannot wedge and is never forced.
 * - UDP: the old CPU's queue head has passed the flow's last frame (RFS's
 *   last_qtail, per rx CPU so that the queue's order is the counters'
 *   order), and every frame of the flow that left the queue has reached
 *   the socket. Dequeue counts alone (RFS_ORDER_QTAIL) are not enough:
 *   the cpumap thread runs its program, then hands frames to GRO, which
 *   may hold them until its next flush (every 64 frames or an empty
 *   queue). A frame lost between the queue and the socket would hold the
 *   move forever: when the flow was quiet for RFS_SET_MAX_HOLD between two
 *   held frames, or the move was held for RFS_SET_MAX_WAIT, it is forced
 *   (and counted), and the frames taken as lost are forgotten.
 * Frames the queue dropped (steer_rfs_drops) or that never reached it
 * (steer_rfs_redirect_err) count as dequeued, so the queue head passes
 * them. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "steer_xdp.h"
#include "steer_rfs.h"

/* A load the compiler may neither merge nor tear (clang 14 has no BPF
 * atomic loads). */
#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

/* The one field of the kernel's struct tcp_sock the TCP rule reads; libbpf
 * relocates its offset against the running kernel's BTF. */
struct tcp_sock {
	__u32 rcv_nxt;
} __attribute__((preserve_access_index));

/* The kernel socket fields the recorder reads; libbpf relocates them
 * against the running kernel's BTF (the anonymous unions mirror the
 * kernel's layout by name). */
struct sock_common {
	union {
		struct {
			__be32 skc_daddr;
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport;
			__u16 skc_num;
		};
	};
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct steer_port_key);
	__type(value, __u32);
} owned_ports SEC(".maps");

/* The LLC of each CPU the recorder may choose, STEER_RFS_NO_LLC for the
 * others (offline, or outside steer's CPUs); sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rfs_llc SEC(".maps");

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

/* (ncpus + 1) * ncpus entries each, sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rfs_enq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rfs_deq SEC(".maps");

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

static __always_inline void count(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&rfs_stats, &stat);
	if (v)
		*v += n;
}

static __always_inline __u64 setting(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&rfs_settings, &which);
	return v ? *v : 0;
}

/* The index of the src -> dst queue counters. */
static __always_inline __u32 queue_index(__u32 src, __u32 dst)
{
	return src * (__u32)setting(RFS_SET_NCPUS) + dst;
}

/* The key of `flow` with any local address (see steer_rfs.h): what the
 * recvmsg hooks record for UDP. 0 when there is no such key to try (not
 * UDP, or no hook records UDP). */
static __always_inline int any_local(const struct steer_flow_key *flow,
				     struct steer_flow_key *any)
{
	if (flow->proto != IPPROTO_UDP || !setting(RFS_SET_UDP_ANY))
		return 0;
	*any = *flow;
	__builtin_memset(any->daddr, 0, sizeof(any->daddr));
	return 1;
}

/* Where a frame's transport segment lies: its offset from the frame's start
 * and its length as the IP header gives it (the pseudo-header's length). */
struct l4_span {
	__u32 off;
	__u32 len;
};

/* Parses an Ethernet frame into its flow key; the TCP sequence number goes
 * to *seq, the segment's place to *span. 0 on success. */
static __always_inline int parse(void *data, void *data_end,
				 struct steer_flow_key *flow, __be32 *seq,
				 struct l4_span *span)
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
		span->len = (__u32)bpf_ntohs(ip->tot_len) - ip->ihl * 4;
		flow->proto = ip->protocol;
		flow->family = 4;
		__builtin_memcpy(flow->saddr, &ip->saddr, 4);
		__builtin_memcpy(flow->daddr, &ip->daddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		l4 = (__u8 *)(ip6 + 1);
		span->len = bpf_ntohs(ip6->payload_len);
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
	span->off = (__u32)(l4 - (__u8 *)data);
	return 0;
}

/* Scratch for the tail of a segment: bpf_csum_diff reads whole 32-bit
 * words, at most 512 bytes a call. One per CPU; XDP programs do not nest. */
#define CSUM_CHUNK 512
#define CSUM_MAX_CHUNKS 8 /* segments up to 4 KiB: veth caps a non-frags
			   * program's MTU below that */
struct csum_scratch {
	__u8 b[CSUM_CHUNK + 4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct csum_scratch);
} rfs_scratch SEC(".maps");

/* Folds a one's complement sum to 16 bits (not complemented). */
static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* The one's complement sum of the segment's pseudo-header, folded: what a
 * sender that leaves its checksum to the device writes into the field. All
 * words as the frame holds them (the sum does not depend on byte order). */
static __always_inline int pseudo_sum(void *data, void *data_end,
				      const struct steer_flow_key *flow,
				      const struct l4_span *span, __u16 *out)
{
	__u64 sum = bpf_htons((__u16)flow->proto) + bpf_htons((__u16)span->len);
	__u16 *w;

	if (flow->family == 4) {
		struct iphdr *ip = data + sizeof(struct ethhdr);
		w = (__u16 *)&ip->saddr;
		if ((void *)(w + 4) > data_end)
			return -1;
#pragma unroll
		for (int i = 0; i < 4; i++)
			sum += w[i];
	} else {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
		w = (__u16 *)&ip6->saddr;
		if ((void *)(w + 16) > data_end)
			return -1;
#pragma unroll
		for (int i = 0; i < 16; i++)
			sum += w[i];
	}
	*out = csum_fold(sum);
	return 0;
}

/* A sender that leaves its checksum to the device (a local socket writing
 * through veth: CHECKSUM_PARTIAL) puts only the pseudo-header's sum in the
 * field, and its skb carries a mark that says so. Native XDP hands the
 * frame on as bytes; the cpumap thread builds a new skb without the mark,
 * and the stack drops the segment as corrupt: every steered segment of
 * such a sender. So before the redirect a field that holds exactly the
 * pseudo-header's sum is completed as the device would have: the
 * complement of the folded sum of the segment as it stands, field
 * included. A full checksum that happens to equal that sum (one in 65536)
 * comes out unchanged; a corrupt one is left for the stack to drop.
 * Returns 1 when the frame may be redirected, 0 when its checksum is
 * partial and could not be completed (it must take the kernel path, which
 * keeps the mark). */
static __always_inline int complete_csum(struct xdp_md *ctx,
					 const struct steer_flow_key *flow,
					 const struct l4_span *span)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 field = flow->proto == IPPROTO_TCP ? 16 : 6;
	__u32 off = span->off & 0xff; /* Ethernet + IPv4 options: < 256 */
	__u32 len = span->len;
	__u16 pseudo;
	__u16 *check;

	if (off != span->off)
		return 1;
	check = data + off + field;
	if ((void *)(check + 1) > data_end)
		return 1;
	if (flow->proto == IPPROTO_UDP && *check == 0)
		return 1; /* UDP over IPv4 without a checksum */
	if (pseudo_sum(data, data_end, flow, span, &pseudo) || *check != pseudo)
		return 1;
	if (len < field + 2 || len > CSUM_CHUNK * CSUM_MAX_CHUNKS ||
	    off + len > (__u32)(data_end - data)) {
		count(RFS_STAT_CSUM_PASSED, 1);
		return 0;
	}

	__u32 zero = 0;
	struct csum_scratch *sc = bpf_map_lookup_elem(&rfs_scratch, &zero);
	if (!sc)
		return 0;
	/* Whole chunks straight from the frame, the rest through the scratch
	 * (bpf_csum_diff takes a constant length from a packet pointer). */
	__s64 sum = 0;
	__u32 done = 0;
	for (__u32 i = 0; i < CSUM_MAX_CHUNKS; i++) {
		if (len - done < CSUM_CHUNK)
			break;
		/* Opaque before the mask: the compiler would otherwise split
		 * the AND into an AND and an OR, whose bound the verifiers of
		 * older kernels (6.1) lose. */
		__u32 at = off + done;
		asm volatile("" : "+r"(at));
		at &= 0x1fff;
		__u8 *p = data + at;
		if ((void *)(p + CSUM_CHUNK) > data_end)
			return 0;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)p, CSUM_CHUNK, (__u32)sum);
		if (sum < 0)
			return 0;
		done += CSUM_CHUNK;
	}
	__u32 n = (len - done) & (CSUM_CHUNK - 1);
	if (n > 0) {
		/* An odd tail is summed as if padded with zeros, as the
		 * checksum is defined. */
		*(__u32 *)&sc->b[n & (CSUM_CHUNK - 4)] = 0;
		/* n itself, in a form older verifiers (6.1) see as at least
		 * 1: they refuse a length that may be 0. */
		__u32 take = ((n - 1) & (CSUM_CHUNK - 1)) + 1;
		if (bpf_xdp_load_bytes(ctx, off + done, sc->b, take))
			return 0;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)sc->b,
				    (n + 3) & (2 * CSUM_CHUNK - 4), (__u32)sum);
		if (sum < 0)
			return 0;
	}

	/* The packet may have moved under the helpers: check again. */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	check = data + off + field;
	if ((void *)(check + 1) > data_end)
		return 0;
	__u16 full = ~csum_fold((__u64)(__u32)sum);
	if (flow->proto == IPPROTO_UDP && full == 0)
		full = 0xffff; /* 0 means "no checksum" to UDP */
	*check = full;
	count(RFS_STAT_CSUM_COMPLETED, 1);
	return 1;
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

/* Whether the serving CPU's queue has passed the flow's last frame. */
static __always_inline int queue_drained(const struct steer_rfs_state *st)
{
	__u32 idx = queue_index(st->last_src, st->cpu);
	__u64 *deq = bpf_map_lookup_elem(&rfs_deq, &idx);
	return !deq || READ_ONCE(*deq) >= st->last_qtail;
}

/* Whether the flow may leave the path serving it now (the cpu differs from
 * the desired one). */
static __always_inline int may_move(struct xdp_md *ctx,
				    const struct steer_flow_key *flow,
				    const struct steer_rfs_state *st, __be32 seq,
				    __u64 order)
{
	if (order == RFS_ORDER_NONE)
		return 1;
	if (order == RFS_ORDER_QTAIL)
		return st->cpu == STEER_RFS_NO_CPU || queue_drained(st);
	if (flow->proto == IPPROTO_TCP)
		return tcp_drained(ctx, flow, seq);
	if (st->cpu == STEER_RFS_NO_CPU) {
		/* Leaving the kernel path: the frames that took it before steer
		 * counted them get time to reach the socket, then every frame
		 * seen must have. */
		if (bpf_ktime_get_ns() - st->created < setting(RFS_SET_UDP_SETTLE))
			return 0;
		return READ_ONCE(st->delivered) >= st->seen;
	}
	return queue_drained(st) &&
	       st->landed_base + READ_ONCE(st->landed) <= READ_ONCE(st->delivered);
}

SEC("xdp")
int steer_rfs(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct steer_flow_key flow = {};
	struct steer_port_key pk = {};
	struct l4_span span = {};
	__be32 seq = 0;

	if (parse(data, data_end, &flow, &seq, &span)) {
		count(RFS_STAT_PASSED, 1);
		return XDP_PASS;
	}
	pk.proto = flow.proto;
	pk.port = flow.dport;
	if (!bpf_map_lookup_elem(&owned_ports, &pk)) {
		count(RFS_STAT_PASSED, 1);
		return XDP_PASS;
	}
	struct steer_rfs_state *st = bpf_map_lookup_elem(&rfs_state, &flow);
	struct steer_rfs_desired *want = bpf_map_lookup_elem(&rfs_desired, &flow);
	struct steer_flow_key any;
	if (!st && any_local(&flow, &any)) {
		/* A UDP flow the recvmsg hooks recorded: keyed by its sender. */
		struct steer_rfs_state *any_st = bpf_map_lookup_elem(&rfs_state, &any);
		if (any_st) {
			st = any_st;
			want = bpf_map_lookup_elem(&rfs_desired, &any);
		}
	}
	if (!want || !st) {
		if (st)
			__sync_fetch_and_add(&st->seen, 1);
		count(want ? RFS_STAT_NO_STATE : RFS_STAT_UNTRACKED, 1);
		return XDP_PASS;
	}

	if (st->cpu != want->cpu) {
		if (may_move(ctx, &flow, st, seq, setting(RFS_SET_ORDER))) {
			if (st->cpu == STEER_RFS_NO_CPU)
				st->landed_base = READ_ONCE(st->delivered);
			st->cpu = want->cpu;
			st->held_since = 0;
			st->hold_start = 0;
			count(RFS_STAT_MOVES, 1);
		} else {
			/* A UDP frame lost between the queue and the socket would
			 * hold the move forever: when the flow was quiet for
			 * RFS_SET_MAX_HOLD (no frame between two held ones), or
			 * the move was held for RFS_SET_MAX_WAIT (a busy flow),
			 * what is missing is taken as lost and the move is
			 * forced. TCP waits: its rule cannot wedge. */
			__u64 now = bpf_ktime_get_ns();
			__u64 last = st->held_since;
			if (!last || !st->hold_start)
				st->hold_start = now;
			st->held_since = now;
			if (flow.proto == IPPROTO_UDP &&
			    ((last && now - last > setting(RFS_SET_MAX_HOLD)) ||
			     now - st->hold_start > setting(RFS_SET_MAX_WAIT))) {
				/* Re-based: the frames taken as lost do not hold
				 * the flow's later moves. */
				st->landed_base = READ_ONCE(st->delivered) - READ_ONCE(st->landed);
				st->cpu = want->cpu;
				st->held_since = 0;
				st->hold_start = 0;
				count(RFS_STAT_MOVES, 1);
				count(RFS_STAT_FORCED, 1);
			} else {
				count(RFS_STAT_HELD_BACK, 1);
			}
		}
	} else if (st->held_since) {
		/* A move given up (the desired CPU is this one again): its hold
		 * must not count as quiet, or as waited, for the next one. */
		st->held_since = 0;
		st->hold_start = 0;
	}
	/* Counted after the decision: `seen` covers the frames before this one,
	 * which is what the UDP rule compares `delivered` with. */
	__sync_fetch_and_add(&st->seen, 1);
	if (st->cpu == STEER_RFS_NO_CPU) {
		/* Still on the kernel path, waiting for it to drain. */
		return XDP_PASS;
	}
	if (setting(RFS_SET_CSUM) && !complete_csum(ctx, &flow, &span))
		return XDP_PASS;

	/* The rx CPU rides in the metadata to the cpumap program (in native
	 * mode; in generic mode it cannot see it, and row ncpus is used). */
	__u32 ncpus = (__u32)setting(RFS_SET_NCPUS);
	__u32 src = setting(RFS_SET_GENERIC) ? ncpus : bpf_get_smp_processor_id();
	if (src != ncpus) {
		if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32)))
			src = ncpus;
		else {
			__u32 *meta = (void *)(long)ctx->data_meta;
			if ((void *)(meta + 1) > (void *)(long)ctx->data)
				return XDP_PASS;
			*meta = src + 1;
		}
	}

	__u32 cpu = st->cpu;
	int action = bpf_redirect_map(&rfs_cpus, cpu, XDP_PASS);
	if (action != XDP_REDIRECT) {
		count(RFS_STAT_REDIRECT_FAILED, 1);
		return action;
	}
	__u32 idx = src * ncpus + cpu;
	__u64 *enq = bpf_map_lookup_elem(&rfs_enq, &idx);
	if (enq) {
		st->last_qtail = __sync_fetch_and_add(enq, 1) + 1;
		st->last_src = src;
	}
	count(RFS_STAT_REDIRECTED, 1);
	return XDP_REDIRECT;
}

SEC("xdp/cpumap")
int steer_rfs_cpu(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 *meta = (void *)(long)ctx->data_meta;
	__u32 ncpus = (__u32)setting(RFS_SET_NCPUS);
	__u32 src = ncpus;

	if ((void *)(meta + 1) <= data && *meta && *meta <= ncpus)
		src = *meta - 1;
	__u32 idx = queue_index(src, bpf_get_smp_processor_id());
	__u64 *deq = bpf_map_lookup_elem(&rfs_deq, &idx);
	if (deq)
		__sync_fetch_and_add(deq, 1);
	count(RFS_STAT_LANDED, 1);

	struct steer_flow_key flow = {};
	struct l4_span span;
	__be32 seq;
	if (!parse(data, data_end, &flow, &seq, &span) && flow.proto == IPPROTO_UDP) {
		struct steer_rfs_state *st = bpf_map_lookup_elem(&rfs_state, &flow);
		struct steer_flow_key any;
		if (!st && any_local(&flow, &any))
			st = bpf_map_lookup_elem(&rfs_state, &any);
		if (st)
			__sync_fetch_and_add(&st->landed, 1);
	}
	return XDP_PASS;
}

SEC("raw_tp/xdp_cpumap_enqueue")
int steer_rfs_drops(struct bpf_raw_tracepoint_args *ctx)
{
	/* TP_PROTO(int map_id, unsigned int processed, unsigned int drops,
	 * int to_cpu), on the CPU that flushed its queue: the frames' rx CPU. */
	__u32 map_id = (__u32)ctx->args[0];
	__u32 drops = (__u32)ctx->args[2];
	__u32 dst = (__u32)ctx->args[3];

	if (!drops || map_id != (__u32)setting(RFS_SET_CPUMAP_ID))
		return 0;
	__u32 ncpus = (__u32)setting(RFS_SET_NCPUS);
	__u32 src = setting(RFS_SET_GENERIC) ? ncpus : bpf_get_smp_processor_id();
	__u32 idx = queue_index(src, dst);
	__u64 *deq = bpf_map_lookup_elem(&rfs_deq, &idx);
	if (deq)
		__sync_fetch_and_add(deq, drops);
	count(RFS_STAT_QUEUE_DROPS, drops);
	return 0;
}

SEC("raw_tp/xdp_redirect_err")
int steer_rfs_redirect_err(struct bpf_raw_tracepoint_args *ctx)
{
	/* TP_PROTO(dev, xdp_prog, tgt, int err, enum bpf_map_type map_type,
	 * u32 map_id, u32 index), on the rx CPU right after the program. */
	__u32 map_id = (__u32)ctx->args[5];
	__u32 dst = (__u32)ctx->args[6];

	if (map_id != (__u32)setting(RFS_SET_CPUMAP_ID))
		return 0;
	__u32 ncpus = (__u32)setting(RFS_SET_NCPUS);
	__u32 src = setting(RFS_SET_GENERIC) ? ncpus : bpf_get_smp_processor_id();
	__u32 idx = queue_index(src, dst);
	__u64 *deq = bpf_map_lookup_elem(&rfs_deq, &idx);
	if (deq)
		__sync_fetch_and_add(deq, 1);
	count(RFS_STAT_REDIRECT_ERRORS, 1);
	return 0;
}

/* Counts a UDP datagram of a tracked flow that reached its socket (the
 * socket filter and the cgroup ingress hook run where the socket's filter
 * runs, right before the datagram is queued to it). `any`: the flow is
 * looked up with any local address, as the recvmsg hooks record it; else
 * by its exact key, as steer tracks the sockets it was handed. */
static __always_inline void count_delivered(struct __sk_buff *skb, int any)
{
	struct steer_flow_key flow = {};
	__u16 ports[2];
	__u32 l4off;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
			return;
		l4off = ip.ihl * 4;
		flow.family = 4;
		flow.proto = ip.protocol;
		__builtin_memcpy(flow.saddr, &ip.saddr, 4);
		if (!any)
			__builtin_memcpy(flow.daddr, &ip.daddr, 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes_relative(skb, 0, &ip6, sizeof(ip6), BPF_HDR_START_NET))
			return;
		l4off = sizeof(ip6);
		flow.family = 6;
		flow.proto = ip6.nexthdr;
		__builtin_memcpy(flow.saddr, &ip6.saddr, 16);
		if (!any)
			__builtin_memcpy(flow.daddr, &ip6.daddr, 16);
	} else {
		return;
	}
	if (flow.proto != IPPROTO_UDP)
		return;
	if (bpf_skb_load_bytes_relative(skb, l4off, ports, sizeof(ports), BPF_HDR_START_NET))
		return;
	flow.sport = ports[0];
	flow.dport = ports[1];

	struct steer_rfs_state *st = bpf_map_lookup_elem(&rfs_state, &flow);
	if (st) {
		/* A GRO'd datagram train counts as its segments. */
		__u64 segs = skb->gso_segs ? skb->gso_segs : 1;
		/* Never above `seen`: frames that took the kernel path before
		 * steer counted them must not make later ones look delivered. */
		for (int i = 0; i < 16; i++) {
			__u64 have = READ_ONCE(st->delivered);
			__u64 seen = READ_ONCE(st->seen);
			__u64 want = have + segs > seen ? seen : have + segs;
			if (want <= have ||
			    __sync_val_compare_and_swap(&st->delivered, have, want) == have)
				break;
		}
		count(RFS_STAT_DELIVERED, 1);
	}
}

SEC("socket")
int steer_rfs_sock(struct __sk_buff *skb)
{
	count_delivered(skb, 0);
	return skb->len;
}

/* The same count for every socket of a cgroup, with no help from the
 * application: the recvmsg hooks' flows (any local address). Runs in
 * sk_filter on the CPU handling the datagram; keeps every datagram. */
SEC("cgroup_skb/ingress")
int steer_rfs_ingress(struct __sk_buff *skb)
{
	/* Every segment and datagram of every socket of the cgroup comes
	 * here: the receiving socket's protocol and port first, so that only
	 * the owned UDP ports' datagrams are parsed. */
	struct bpf_sock *sk = skb->sk;
	struct steer_port_key pk = {};

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_UDP || !setting(RFS_SET_UDP_ANY))
		return 1;
	pk.proto = IPPROTO_UDP;
	pk.port = bpf_htons((__u16)sk->src_port);
	if (bpf_map_lookup_elem(&owned_ports, &pk))
		count_delivered(skb, 1);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";

static __always_inline __u32 llc_of(__u32 cpu)
{
	__u32 *llc = bpf_map_lookup_elem(&rfs_llc, &cpu);
	return llc ? *llc : STEER_RFS_NO_LLC;
}

/* Whether a v6 address is v4-mapped (::ffff:a.b.c.d). */
static __always_inline int v4_mapped(const struct in6_addr *a)
{
	return a->in6_u.u6_addr32[0] == 0 && a->in6_u.u6_addr32[1] == 0 &&
	       a->in6_u.u6_addr32[2] == bpf_htonl(0xffff);
}

/* The key the XDP program builds for the socket's incoming frames (from
 * the peer to the local address; to any local address for a connected
 * UDP socket), once the protocol and local port said the socket is an
 * owned one: the tracepoint fires for every read on the
 * host, and most sockets leave after two reads. 0 on success. */
static __always_inline int sock_flow(struct sock *sk, struct steer_flow_key *flow)
{
	struct steer_port_key pk = {};
	unsigned short family;
	__be32 d4, s4;
	__u8 proto = (__u8)BPF_CORE_READ(sk, sk_protocol);
	/* The flow is keyed with any local address (a UDP one). */
	int any = 0;

	if (proto == IPPROTO_UDP) {
		/* A connected UDP socket (its peer is set): the flow from that
		 * peer, keyed by its sender as the recvmsg hooks key theirs,
		 * when UDP is recorded in the kernel. An unconnected socket's
		 * reads are the recvmsg hooks' (they see each sender). */
		if (!setting(RFS_SET_UDP_ANY) || !BPF_CORE_READ(sk, __sk_common.skc_dport))
			return -1;
		any = 1;
	} else if (proto != IPPROTO_TCP) {
		return -1;
	}
	pk.proto = proto;
	pk.port = bpf_htons(BPF_CORE_READ(sk, __sk_common.skc_num));
	if (!bpf_map_lookup_elem(&owned_ports, &pk))
		return -1;
	flow->proto = proto;
	flow->dport = pk.port;
	flow->sport = BPF_CORE_READ(sk, __sk_common.skc_dport);
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family == 10 /* AF_INET6 */) {
		struct in6_addr d6, s6;
		BPF_CORE_READ_INTO(&d6, sk, __sk_common.skc_v6_daddr);
		BPF_CORE_READ_INTO(&s6, sk, __sk_common.skc_v6_rcv_saddr);
		if (!v4_mapped(&d6)) {
			flow->family = 6;
			__builtin_memcpy(flow->saddr, &d6, 16);
			if (!any)
				__builtin_memcpy(flow->daddr, &s6, 16);
			return 0;
		}
	} else if (family != 2 /* AF_INET */) {
		return -1;
	}
	d4 = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	s4 = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
	flow->family = 4;
	__builtin_memcpy(flow->saddr, &d4, 4);
	if (!any)
		__builtin_memcpy(flow->daddr, &s4, 4);
	return 0;
}

/* A read of `flow` on this CPU: its desired CPU under the recorder's rule
 * (rps_record_sock_flow without the application's help). */
static __always_inline void record_read(const struct steer_flow_key *flow, __u64 rule)
{
	count(RFS_STAT_RECORDED, 1);

	__u32 cpu = bpf_get_smp_processor_id();
	__u32 llc = llc_of(cpu);
	if (llc == STEER_RFS_NO_LLC)
		return; /* a CPU steer does not steer to */
	struct steer_rfs_desired *want = bpf_map_lookup_elem(&rfs_desired, flow);
	if (want) {
		__u32 old = READ_ONCE(want->cpu);
		if (old == cpu)
			return;
		/* The LLC rule: a move within the old CPU's LLC keeps the
		 * entry (and its steering) as it is, unless the old CPU is
		 * gone. */
		__u32 old_llc = llc_of(old);
		if (rule == RFS_RECORD_LLC && old_llc != STEER_RFS_NO_LLC && old_llc == llc) {
			count(RFS_STAT_REC_SUPPRESSED, 1);
			return;
		}
		want->cpu = cpu;
		count(RFS_STAT_REC_UPDATES, 1);
		return;
	}
	/* A new flow: its state first (still on the kernel path), then the
	 * desired CPU the XDP program moves it to, in order. A state left
	 * from before (the sweeper forgets the desired entry first) is kept;
	 * the flow counts as new when its desired entry is made, so every
	 * first placement is one new flow and one update. */
	struct steer_rfs_state st = {
		.cpu = STEER_RFS_NO_CPU,
		.created = bpf_ktime_get_ns(),
	};
	bpf_map_update_elem(&rfs_state, flow, &st, BPF_NOEXIST);
	struct steer_rfs_desired d = { .cpu = cpu };
	if (bpf_map_update_elem(&rfs_desired, flow, &d, BPF_NOEXIST) == 0) {
		count(RFS_STAT_REC_NEW, 1);
		count(RFS_STAT_REC_UPDATES, 1);
	}
}

/* sock_recv_length(struct sock *sk, int ret, int flags): fires in
 * sock_recvmsg on the reading CPU, after the read. */
SEC("raw_tracepoint/sock_recv_length")
int steer_rfs_record(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	int ret = (int)ctx->args[1];
	int flags = (int)ctx->args[2];
	__u64 rule = setting(RFS_SET_RECORD);
	struct steer_flow_key flow = {};

	if (rule == RFS_RECORD_OFF || !sk || ret <= 0 || (flags & 2 /* MSG_PEEK */))
		return 0;
	if (sock_flow(sk, &flow))
		return 0;
	record_read(&flow, rule);
	return 0;
}

/* The UDP flow of a datagram an application just read through `ctx` (a
 * recvmsg hook: the sender is in user_ip4/user_ip6 and user_port, the
 * socket's local port in ctx->sk), keyed with any local address. 0 when
 * it is one to record. */
static __always_inline int recvmsg_flow(struct bpf_sock_addr *ctx,
					struct steer_flow_key *flow)
{
	struct steer_port_key pk = {};
	struct bpf_sock *sk = ctx->sk;

	if (!sk || ctx->protocol != IPPROTO_UDP)
		return -1;
	pk.proto = IPPROTO_UDP;
	pk.port = bpf_htons((__u16)sk->src_port);
	if (!bpf_map_lookup_elem(&owned_ports, &pk))
		return -1;
	flow->proto = IPPROTO_UDP;
	flow->dport = pk.port;
	flow->sport = (__be16)ctx->user_port;
	return 0;
}

/* udp_recvmsg's hook, on the reading CPU, for each datagram read with its
 * sender's address asked for (recvfrom, recvmsg with msg_name: what an
 * unconnected server does to answer). Fires for the sockets of the
 * cgroup it is attached to (and its descendants). Returns 1: the read
 * goes on unchanged. */
SEC("cgroup/recvmsg4")
int steer_rfs_recvmsg4(struct bpf_sock_addr *ctx)
{
	struct steer_flow_key flow = {};
	__u64 rule = setting(RFS_SET_RECORD);

	if (rule == RFS_RECORD_OFF || recvmsg_flow(ctx, &flow))
		return 1;
	__be32 peer = ctx->user_ip4;
	flow.family = 4;
	__builtin_memcpy(flow.saddr, &peer, 4);
	record_read(&flow, rule);
	return 1;
}

SEC("cgroup/recvmsg6")
int steer_rfs_recvmsg6(struct bpf_sock_addr *ctx)
{
	struct steer_flow_key flow = {};
	__u64 rule = setting(RFS_SET_RECORD);
	__u32 a[4];

	if (rule == RFS_RECORD_OFF || recvmsg_flow(ctx, &flow))
		return 1;
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	if (a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff)) {
		/* A v4 sender on a dual-stack socket: its frames carry IPv4. */
		flow.family = 4;
		__builtin_memcpy(flow.saddr, &a[3], 4);
	} else {
		flow.family = 6;
		__builtin_memcpy(flow.saddr, a, 16);
	}
	record_read(&flow, rule);
	return 1;
}
