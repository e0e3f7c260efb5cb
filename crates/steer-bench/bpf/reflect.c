// SPDX-License-Identifier: GPL-2.0
/* The floor: an XDP program on the server's veth end that reflects UDP/IPv4
 * datagrams to its port (MACs, addresses and ports swapped, XDP_TX): what the
 * path costs with no server at all. The checksums stay valid (swapping
 * 16-bit words leaves one's complement sums unchanged). Everything else goes
 * to the kernel. XDP_TX into a veth needs NAPI on the other end (an XDP
 * program there: the generator's gen_rx). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "bench.h"

SEC("xdp")
int reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	unsigned char mac[ETH_ALEN];
	__u32 zero = 0, addr;
	__u16 port;

	if ((void *)(udp + 1) > data_end)
		return count(BENCH_STAT_PASS, XDP_PASS);
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return count(BENCH_STAT_PASS, XDP_PASS);
	struct bench_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || udp->dest != cfg->port_be)
		return count(BENCH_STAT_PASS, XDP_PASS);
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	return count(BENCH_STAT_HIT, XDP_TX);
}

char LICENSE[] SEC("license") = "GPL";
