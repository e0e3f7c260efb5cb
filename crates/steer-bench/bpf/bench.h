/* SPDX-License-Identifier: GPL-2.0 */
/* The steer-bench payload as the XDP programs see it (mirrors
 * src/payload.rs). It starts like a sockperf 3.x client message (sequence
 * number, flags, length; big-endian) so `sockperf server` answers it. */
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

#endif
