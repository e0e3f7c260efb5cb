/* Layouts shared by steer's XDP RFS program for kernel sockets
 * (bpf/steer_rfs.c) and xdp-io (src/rfs/, which writes them byte by byte;
 * keep them in step). The flow key is `struct steer_flow_key` and the port
 * key `struct steer_port_key` of steer_xdp.h. */
#ifndef STEER_RFS_H
#define STEER_RFS_H

#include <linux/types.h>

/* `state.cpu` of a flow still on the kernel's own path. */
#define STEER_RFS_NO_CPU 0xffffffffu

/* Value of `rfs_desired`: the CPU whose kernel stack should handle the
 * flow, written by steer (the costly update). */
struct steer_rfs_desired {
	__u32 cpu;
	__u32 pad;
};

/* Value of `rfs_state`: made by steer when it starts tracking a flow, then
 * written by the programs only (steer reads it, and deletes it with the
 * flow). */
struct steer_rfs_state {
	__u64 seen;       /* frames of the flow the XDP program saw */
	__u64 delivered;  /* UDP: frames the socket filter saw, never above seen */
	__u64 last_qtail; /* qtail rule: the CPU's enqueue count after the last frame */
	__u64 held_since; /* ns of the first frame a pending move held back; 0: none */
	__u64 created;    /* ns (CLOCK_MONOTONIC) when steer made the entry */
	__u32 cpu;        /* CPU serving the flow, STEER_RFS_NO_CPU: kernel path */
	__u32 pad;
};

/* Value of `rfs_queues[cpu]` (qtail rule): frames redirected to the CPU and
 * frames its cpumap program has seen. */
struct steer_rfs_queue {
	__u64 enqueued;
	__u64 dequeued;
	__u64 pad[6]; /* one cache line per CPU */
};

/* Indices of the `rfs_settings` array (__u64 values). */
enum steer_rfs_setting {
	RFS_SET_ORDER = 0,      /* enum steer_rfs_order */
	RFS_SET_MAX_HOLD = 1,   /* ns a move may be held back; then forced */
	RFS_SET_UDP_SETTLE = 2, /* ns after tracking starts before a UDP flow is placed */
	RFS_SET_MAX = 3,
};

/* When a flow may leave the CPU (or the kernel path) that serves it. */
enum steer_rfs_order {
	/* TCP: the socket's rcv_nxt has reached the frame's sequence number;
	 * UDP: the socket filter has seen every frame the XDP program saw. */
	RFS_ORDER_SOCKET = 0,
	/* RFS's last_qtail rule on the cpumap queues: the old CPU's cpumap
	 * program has dequeued the flow's last frame. */
	RFS_ORDER_QTAIL = 1,
	/* No rule: move at once (for measuring what the rules prevent). */
	RFS_ORDER_NONE = 2,
};

/* Indices of the per-CPU `rfs_stats` array. */
enum steer_rfs_stat {
	RFS_STAT_REDIRECTED = 0,     /* frames redirected into a cpumap entry */
	RFS_STAT_PASSED = 1,         /* frames not owned (other traffic) */
	RFS_STAT_UNTRACKED = 2,      /* owned frames of flows steer has no CPU for */
	RFS_STAT_MOVES = 3,          /* flows placed or moved */
	RFS_STAT_HELD_BACK = 4,      /* frames kept on the old path by a pending move */
	RFS_STAT_FORCED = 5,         /* moves forced after RFS_SET_MAX_HOLD */
	RFS_STAT_REDIRECT_FAILED = 6,/* no cpumap entry for the CPU: passed */
	RFS_STAT_LANDED = 7,         /* per CPU: frames its cpumap program saw */
	RFS_STAT_DELIVERED = 8,      /* per CPU: UDP frames the socket filter saw */
	RFS_STAT_NO_STATE = 9,       /* owned frames with a CPU but no state: passed */
	RFS_STAT_MAX = 10,
};

#endif
