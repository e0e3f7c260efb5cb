/* Layouts shared by the steer XDP program and steer-xdp (src/program/keys.rs writes
 * the map keys byte by byte in these layouts, and src/umem.rs reads
 * steer_meta; keep them in step). */
#ifndef STEER_XDP_H
#define STEER_XDP_H

#include <linux/types.h>

/* Key of `owned_ports`: an IP protocol (IPPROTO_UDP, IPPROTO_TCP) and a
 * destination port in network byte order. Value: __u32, 1 = owned. */
struct steer_port_key {
	__u8 proto;
	__u8 pad;
	__be16 port; /* network byte order */
};

/* Key of `flow_socks`: a 5-tuple; IPv4 addresses sit in the first 4 bytes of
 * the 16-byte fields, the rest zero. Value: __u32, an index into `xsks_map`. */
struct steer_flow_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family; /* 4 or 6 */
	__u8 pad[2];
};

/* Written in front of every redirected frame (the XDP metadata area, which
 * AF_XDP copies along with the packet). */
struct steer_meta {
	__u32 rx_hash;      /* valid when flags & STEER_META_HASH */
	__u16 rx_hash_type; /* enum xdp_rss_hash_type, low 16 bits */
	__u16 flags;
};
#define STEER_META_HASH 1
#define STEER_META_MAGIC 0x5300 /* in flags: metadata was written by steer */

/* Indices of the `settings` array (__u32 values). */
enum steer_setting {
	/* What to do with owned traffic: STEER_OWNED_*. */
	SETTING_OWNED_ACTION = 0,
	/* The owner record: the pid of the process that attached the program
	 * and that process's start time (clock ticks after boot, field 22 of
	 * /proc/<pid>/stat), low and high 32 bits. The program never reads
	 * them; a later engine does, to tell a live owner from a dead one. */
	SETTING_OWNER_PID = 1,
	SETTING_OWNER_START_LO = 2,
	SETTING_OWNER_START_HI = 3,
	/* The new-flow gate (see below): 1 = closed. */
	SETTING_GATE = 4,
	/* The key of the gate's hash (random per engine, so a sender cannot
	 * aim at slots). */
	SETTING_GATE_SEED = 5,
	SETTING_MAX = 6,
};

/* The new-flow gate. While the engine's flow budget is full it closes the
 * gate, and the program drops the first datagram of every flow the engine
 * has not admitted, before the copy into the UMEM; the same flow's next
 * datagram within STEER_GATE_RETRY_EPOCHS epochs (2^30 ns each, about a
 * second) is a retry and goes through. A spray of one-datagram flows then
 * costs the engine nothing, and a client that retries still gets in.
 *
 * `admitted`: one __u8 counter per slot (eight slots per 8-byte element,
 * the map mmapped by the engine, which counts each open flow in slot
 * hash & (STEER_GATE_ADMIT_SLOTS - 1); a counter that reached 255 stays
 * there). `first_seen`: one __u32 per slot (two per element), the
 * fingerprint of the flow last dropped there (high 24 bits) and the epoch
 * it was dropped in (low 8 bits); 0 is empty.
 *
 * The hash (steer-xdp's gate.rs computes the same): h = seed; for each of
 * the ten native-endian 32-bit words w of a struct steer_flow_key:
 * h = rotl32((h ^ w) * 0x9e3779b1, 13); then murmur3's fmix32. */
#define STEER_GATE_ADMIT_SLOTS (1u << 22)
#define STEER_GATE_SEEN_SLOTS (1u << 20)
#define STEER_GATE_RETRY_EPOCHS 8

static __always_inline __u32 steer_gate_fmix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 steer_gate_hash(const struct steer_flow_key *k, __u32 seed)
{
	const __u8 *b = (const __u8 *)k;
	__u32 h = seed;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*k) / 4); i++) {
		__u32 w;
		__builtin_memcpy(&w, b + 4 * i, 4);
		h = (h ^ w) * 0x9e3779b1;
		h = (h << 13) | (h >> 19);
	}
	return steer_gate_fmix(h);
}

/* Value of `settings[SETTING_OWNED_ACTION]`. DROP exists to measure the
 * kernel-only ceiling with the same parsing work; PASS hands owned traffic
 * to the kernel (an engine with no worker left fails open). */
#define STEER_OWNED_REDIRECT 0
#define STEER_OWNED_DROP 1
#define STEER_OWNED_PASS 2

/* Indices of the per-CPU `stats` array. */
enum steer_stat {
	STAT_REDIRECTED = 0,
	STAT_PASSED = 1,
	STAT_FLOW_HITS = 2,
	STAT_HASH_OK = 3,
	STAT_REDIRECT_FAILED = 4,
	STAT_DROPPED = 5,
	STAT_VLAN = 6,
	/* First datagrams of unadmitted flows dropped at the closed gate. */
	STAT_GATE_DROPPED = 7,
	/* Retries of dropped flows let through the closed gate. */
	STAT_GATE_RETRIES = 8,
	STAT_MAX = 9,
};

#endif
