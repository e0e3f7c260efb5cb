/* Layouts shared by steer's XDP RFS program for kernel sockets
 * (bpf/steer_rfs.c) and steer-xdp (src/rfs/, which writes them byte by byte;
 * keep them in step). The flow key is `struct steer_flow_key` and the port
 * key `struct steer_port_key` of steer_xdp.h. */
#ifndef STEER_RFS_H
#define STEER_RFS_H

#include <linux/types.h>

/* A UDP flow the recvmsg hooks recorded is keyed with a zero `daddr` ("any
 * local address"): an unconnected socket bound to the wildcard address
 * does not know which of its addresses a datagram was sent to, and the
 * hook sees only the sender. The programs look such a key up after the
 * exact one misses, while RFS_SET_UDP_ANY is set. */

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
	__u64 seen;        /* frames of the flow the XDP program saw */
	__u64 delivered;   /* UDP: frames the socket filter saw, never above seen */
	__u64 landed;      /* frames of the flow the cpumap programs saw */
	__u64 landed_base; /* UDP: `delivered` when the flow left the kernel path */
	__u64 last_qtail;  /* the src->cpu enqueue count after the last frame */
	__u64 held_since;  /* ns of the last frame a pending move held back; 0: none */
	__u64 created;     /* ns (CLOCK_MONOTONIC) when steer made the entry */
	__u32 cpu;         /* CPU serving the flow, STEER_RFS_NO_CPU: kernel path */
	__u32 last_src;    /* rx CPU (queue row) of the last redirected frame */
	__u64 hold_start;  /* ns of the first frame the pending move held back */
};

/* The `rfs_enq` and `rfs_deq` arrays are indexed by src * ncpus + dst: src
 * the CPU whose XDP program redirected the frame (row ncpus: unknown, in
 * generic mode, where the cpumap program cannot see the metadata carrying
 * it), dst the cpumap entry's CPU. enq is written by src only; deq by dst's
 * cpumap program and, for frames the cpumap queue dropped, by src's
 * xdp_cpumap_enqueue tracepoint program. */

/* Indices of the `rfs_settings` array (__u64 values). */
enum steer_rfs_setting {
	RFS_SET_ORDER = 0,      /* enum steer_rfs_order */
	RFS_SET_MAX_HOLD = 1,   /* ns of quiet after which a held UDP move is forced */
	RFS_SET_UDP_SETTLE = 2, /* ns after tracking starts before a UDP flow is placed */
	RFS_SET_NCPUS = 3,      /* possible CPUs: the rows of rfs_enq/rfs_deq */
	RFS_SET_CPUMAP_ID = 4,  /* id of rfs_cpus, for the drop tracepoint */
	RFS_SET_GENERIC = 5,    /* 1: attached in generic mode (no metadata) */
	RFS_SET_CSUM = 6,       /* 1: complete partial checksums before a redirect */
	RFS_SET_RECORD = 7,     /* enum steer_rfs_record: the in-kernel recorder */
	RFS_SET_UDP_ANY = 8,    /* 1: UDP flows may be keyed with any local address */
	RFS_SET_MAX_WAIT = 9,   /* ns a UDP move may be held, busy or not, before it is forced */
	RFS_SET_MAX = 10,
};

/* What the in-kernel recorders (steer_rfs_record for TCP, steer_rfs_recvmsg4
 * and steer_rfs_recvmsg6 for UDP) do when an application reads a flow: nothing, or write the reading CPU into
 * `rfs_desired` under a rule. */
enum steer_rfs_record {
	RFS_RECORD_OFF = 0,
	/* Only when the flow crosses an LLC (`rfs_llc`), or its CPU is gone. */
	RFS_RECORD_LLC = 1,
	/* Whenever the reading CPU changes. */
	RFS_RECORD_ALWAYS = 2,
};

/* `rfs_llc[cpu]` of a CPU that is offline or not the recorder's. */
#define STEER_RFS_NO_LLC 0xffffffffu

/* When a flow may leave the CPU (or the kernel path) that serves it. */
enum steer_rfs_order {
	/* TCP: the socket's rcv_nxt has reached the frame's sequence number;
	 * UDP: the old CPU's queue has passed the flow's last frame and every
	 * frame that left it has reached the socket. */
	RFS_ORDER_SOCKET = 0,
	/* RFS's last_qtail rule alone: the old CPU's queue has passed the
	 * flow's last frame (its cpumap program saw it, or the queue dropped
	 * it). */
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
	RFS_STAT_FORCED = 5,         /* UDP moves forced (RFS_SET_MAX_HOLD of quiet, RFS_SET_MAX_WAIT held) */
	RFS_STAT_REDIRECT_FAILED = 6,/* no cpumap entry for the CPU: passed */
	RFS_STAT_LANDED = 7,         /* per CPU: frames its cpumap program saw */
	RFS_STAT_DELIVERED = 8,      /* per CPU: UDP frames the socket filter saw */
	RFS_STAT_NO_STATE = 9,       /* owned frames with a CPU but no state: passed */
	RFS_STAT_QUEUE_DROPS = 10,   /* per rx CPU: frames a full cpumap queue dropped */
	RFS_STAT_REDIRECT_ERRORS = 11, /* per rx CPU: frames that failed to reach the queue */
	RFS_STAT_CSUM_COMPLETED = 12, /* partial checksums completed before a redirect */
	RFS_STAT_CSUM_PASSED = 13,    /* partial checksums too long to complete: passed */
	RFS_STAT_RECORDED = 14,       /* reads the recorders saw (TCP reads, UDP datagrams) */
	RFS_STAT_REC_NEW = 15,        /* flows the recorder started tracking */
	RFS_STAT_REC_UPDATES = 16,    /* desired CPUs the recorder wrote (moves) */
	RFS_STAT_REC_SUPPRESSED = 17, /* CPU changes the LLC rule left unwritten */
	RFS_STAT_MAX = 18,
};

#endif
