// SPDX-License-Identifier: GPL-2.0
/* steer-bench's receive path on the generator's veth end: replies from the
 * server under test (UDP over IPv4, source port = the server's, carrying the
 * steer-bench magic) get their arrival time (bpf_ktime_get_ns, CLOCK_MONOTONIC)
 * written into the payload and are redirected to the AF_XDP socket of the
 * receiving queue; everything else goes to the kernel. Stamping here makes
 * latency independent of when the generator thread wakes up. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "bench.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

SEC("xdp")
int gen_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u8 *payload = (void *)(udp + 1);
	__u32 zero = 0;
	__u16 magic;
	__u64 now;

	if ((void *)(payload + BENCH_PAYLOAD_LEN) > data_end)
		return count(BENCH_STAT_PASS, XDP_PASS);
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return count(BENCH_STAT_PASS, XDP_PASS);
	struct bench_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || udp->source != cfg->port_be)
		return count(BENCH_STAT_PASS, XDP_PASS);
	__builtin_memcpy(&magic, payload + BENCH_MAGIC_OFF, sizeof(magic));
	if (magic != BENCH_MAGIC)
		return count(BENCH_STAT_PASS, XDP_PASS);
	now = bpf_ktime_get_ns();
	__builtin_memcpy(payload + BENCH_RX_TS_OFF, &now, sizeof(now));
	int action = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
	return count(action == XDP_REDIRECT ? BENCH_STAT_HIT : BENCH_STAT_FAIL, action);
}

char LICENSE[] SEC("license") = "GPL";
