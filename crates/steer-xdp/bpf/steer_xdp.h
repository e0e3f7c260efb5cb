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
	SETTING_MAX = 4,
};

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
	STAT_MAX = 7,
};

#endif
