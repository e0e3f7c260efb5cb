/* SPDX-License-Identifier: GPL-2.0 */
/* What steer-bench's XDP programs share: the payload as they see it
 * (mirrors src/payload.rs; it starts like a sockperf 3.x client message,
 * sequence number, flags, length, big-endian, so `sockperf server` answers
 * it), their `config` and per-CPU `stats` maps (src/xdp.rs fills and reads
 * them) and `count`, which bumps a stat and passes an action through.
 * Include after <bpf/bpf_helpers.h>. */
#ifndef STEER_BENCH_H
#define STEER_BENCH_H

#define BENCH_MAGIC_OFF 14 /* u16, BENCH_MAGIC in host order */
#define BENCH_RX_TS_OFF 32 /* u64, written by gen_rx on arrival */
#define BENCH_PAYLOAD_LEN 40
#define BENCH_MAGIC 0x5342 /* "SB" */

/* Indices of the per-CPU `stats` arrays. */
enum { BENCH_STAT_HIT = 0, BENCH_STAT_PASS = 1, BENCH_STAT_FAIL = 2, BENCH_STAT_MAX = 3 };

struct bench_config {
	__u16 port_be; /* gen_rx: the server's port (replies' source); reflect: its own port */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BENCH_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Bumps stat `stat` on this CPU and returns `action`. */
static __always_inline int count(__u32 stat, int action)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &stat);
	if (v)
		*v += 1;
	return action;
}

#endif
