//! [`LiveStats`]: what a running engine publishes about itself, the one
//! snapshot both the stats socket (as JSON) and `/metrics` (as Prometheus
//! text) are made from.
//!
//! Invariants: a snapshot is built from the same per-CPU counter blocks
//! [`Engine::stats`](crate::engine::Engine::stats) reads (steer-core's
//! `softnet_data` analog and the engine's transmit counters), the kernel's
//! `XDP_STATISTICS` of each socket and the frame ledgers; building one
//! never touches the packet path beyond taking each socket's lock once
//! (see [`crate::observe`]). Counters only grow while one engine runs;
//! the frame places are approximate while packets move (exact when idle).
//! The serialized form carries [`FORMAT_VERSION`]; a reader refuses another.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use steer_core::balance::BalanceStats;
use steer_core::cpu::CpuId;
use steer_core::stats::LocalStats;

/// The version of the JSON a stats socket speaks.
pub const FORMAT_VERSION: u32 = 1;

/// A point-in-time view of a running engine, as published to other
/// processes.
///
/// ```
/// use steer_engine::observe::{CpuCounters, LiveStats};
/// let mut live = LiveStats::empty("eth1");
/// live.per_cpu.push(CpuCounters { cpu: 0, tx: 5, ..Default::default() });
/// live.per_cpu.push(CpuCounters { cpu: 1, tx: 2, ..Default::default() });
/// assert_eq!(live.total().tx, 7);
/// let json = serde_json::to_string(&live).unwrap();
/// assert_eq!(serde_json::from_str::<LiveStats>(&json).unwrap(), live);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveStats {
    /// [`FORMAT_VERSION`] of the engine that wrote it.
    pub version: u32,
    /// The interface the engine serves.
    pub interface: String,
    /// The engine's process id.
    pub pid: u32,
    /// Seconds since the engine started.
    pub uptime_s: f64,
    /// The desired-table update policy now (`llc` or `always`).
    pub policy: String,
    /// Whether the same-CPU fast path is on.
    pub fast_path: bool,
    /// Whether the per-CPU flow limit is on.
    #[serde(default)]
    pub flow_limit: bool,
    /// The XDP attach mode in use (`native`, `generic`).
    pub xdp_mode: String,
    /// The AF_XDP bind mode in use (`copy`, `zerocopy`).
    pub bind_mode: String,
    /// One row per worker CPU.
    pub per_cpu: Vec<CpuCounters>,
    /// Desired-CPU table writes by reason, and the suppressed changes.
    pub desired: DesiredCounters,
    /// One entry per AF_XDP socket (rx queue).
    pub sockets: Vec<SocketCounters>,
    /// Where the UMEM's frames are.
    pub frames: FrameCounters,
    /// The load balancer's counters (all 0 from an engine without one).
    #[serde(default)]
    pub balance: BalanceStats,
    /// Flow delivery's budget counters (`None`: the engine delivers no
    /// flows).
    #[serde(default)]
    pub flows: Option<HubStats>,
    /// Each worker: up or dead, its restarts and its last panic message.
    #[serde(default)]
    pub workers: Vec<WorkerStatus>,
    /// The slow path: datagrams the kernel reassembled from fragments,
    /// read from the engine's kernel sockets on the owned UDP ports (all 0
    /// from an engine that predates it).
    #[serde(default)]
    pub slow_path: SlowPathStats,
}

/// The slow path's counters: fragmented datagrams to an owned UDP port,
/// reassembled by the kernel, read from the engine's kernel socket on that
/// port, handed to the flow's worker and answered through the socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlowPathStats {
    /// Kernel sockets bound (an IPv4 and an IPv6 one per owned UDP port).
    pub sockets: u64,
    /// Sockets that could not be bound (the port is another process's):
    /// fragmented datagrams to it are not answered.
    pub bind_failed: u64,
    /// Datagrams read from the sockets.
    pub received: u64,
    /// Their payload bytes.
    pub received_bytes: u64,
    /// Replies sent back through the sockets.
    pub answered: u64,
    /// Their payload bytes.
    pub answered_bytes: u64,
    /// Datagrams the handler consumed without a reply.
    pub consumed: u64,
    /// Datagrams the handler refused, or whose reply was no UDP datagram
    /// from an owned port.
    pub refused: u64,
    /// Dropped: longer than the read buffer (cut by the kernel).
    pub too_large: u64,
    /// Dropped: the flow's worker had its slow-path queue full, or no
    /// worker was left.
    pub queue_full: u64,
    /// Replies the socket did not take (its send buffer full, or an error).
    pub send_failed: u64,
    /// Dropped: still queued for a worker when the engine stopped.
    pub left_at_stop: u64,
}

/// One worker's health in a [`LiveStats`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its CPU.
    pub cpu: CpuId,
    /// Whether it runs (false: its handler panicked past its restart
    /// limit; its queues and flows moved to the others).
    pub up: bool,
    /// The last panic message: the one it died of, or the last it was
    /// restarted after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panic: Option<String>,
    /// Times it was restarted in place after its handler panicked.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LiveStats {
    /// A snapshot with no CPU, socket or frame (for tests and examples).
    pub fn empty(interface: &str) -> Self {
        Self {
            version: FORMAT_VERSION,
            interface: interface.into(),
            pid: std::process::id(),
            uptime_s: 0.0,
            policy: "llc".into(),
            fast_path: true,
            flow_limit: false,
            xdp_mode: String::new(),
            bind_mode: String::new(),
            per_cpu: Vec::new(),
            desired: DesiredCounters::default(),
            sockets: Vec::new(),
            frames: FrameCounters::default(),
            balance: BalanceStats::default(),
            flows: None,
            workers: Vec::new(),
            slow_path: SlowPathStats::default(),
        }
    }

    /// The sum of the per-CPU rows (its `cpu` is 0).
    pub fn total(&self) -> CpuCounters {
        let mut t = CpuCounters::default();
        for r in &self.per_cpu {
            t.add(r);
        }
        t
    }

    /// Steering updates: flow moves that called the steering hook.
    pub fn steering_updates(&self) -> u64 {
        self.per_cpu.iter().map(|r| r.core.hook_calls).sum()
    }
}

/// One worker CPU's counters: steer-core's dispatch counters (the
/// `softnet_stat` analog) and the engine's transmit and handler verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuCounters {
    /// The CPU.
    pub cpu: usize,
    /// Dispatch and worker counters (rx, processed, ring drops, ...).
    #[serde(flatten)]
    pub core: LocalStats,
    /// Replies put on the tx ring.
    pub tx: u64,
    /// Replies recycled because the tx ring stayed full.
    pub tx_dropped: u64,
    /// Packets the handler consumed without a reply.
    pub consumed: u64,
    /// Packets the handler refused.
    pub app_dropped: u64,
}

impl CpuCounters {
    /// Field-wise sum (the `cpu` stays).
    pub fn add(&mut self, o: &CpuCounters) {
        self.core.add(&o.core);
        self.tx += o.tx;
        self.tx_dropped += o.tx_dropped;
        self.consumed += o.consumed;
        self.app_dropped += o.app_dropped;
    }

    /// Frames dropped by steer on this CPU for any reason: ring full, flow
    /// limit, malformed, tx ring full, refused by the handler.
    pub fn drops(&self) -> u64 {
        self.core.dropped
            + self.core.flow_limit_drops
            + self.core.malformed
            + self.tx_dropped
            + self.app_dropped
    }
}

/// The desired-CPU table's writes (each may become a steering update) and
/// the same-flow CPU changes the update rule did not write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DesiredCounters {
    /// Writes by reason (`new_or_other_flow`, `changed`, `forced_offline`,
    /// `forced_affinity`, `cross_llc`).
    pub updates: BTreeMap<String, u64>,
    /// Same-flow changes kept on the old CPU (same LLC, old CPU usable).
    pub suppressed: u64,
}

impl DesiredCounters {
    /// All writes.
    pub fn total_updates(&self) -> u64 {
        self.updates.values().sum()
    }
}

/// One AF_XDP socket: the kernel's `XDP_STATISTICS`, the socket's packet
/// counts and its rings' occupancy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SocketCounters {
    /// The rx queue the socket is bound to.
    pub queue: u32,
    /// Frames received from the rx ring.
    pub rx_packets: u64,
    /// Transmissions completed.
    pub tx_packets: u64,
    /// Wakeup system calls (tx kicks, fill-ring wakeups).
    pub wakeups: u64,
    /// Multi-buffer packets received (spanning several frames).
    pub multi_rx_packets: u64,
    /// Multi-buffer packets put on the tx ring.
    pub multi_tx_packets: u64,
    /// Multi-buffer packets refused.
    pub multi_refused: u64,
    /// `XDP_STATISTICS.rx_dropped`: dropped for reasons other than invalid
    /// descriptors (e.g. a frame larger than the UMEM frame).
    pub rx_dropped: u64,
    /// `XDP_STATISTICS.rx_invalid_descs`.
    pub rx_invalid_descs: u64,
    /// `XDP_STATISTICS.rx_ring_full`: dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// `XDP_STATISTICS.rx_fill_ring_empty_descs`: a frame arrived and the
    /// fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// `XDP_STATISTICS.tx_invalid_descs`.
    pub tx_invalid_descs: u64,
    /// `XDP_STATISTICS.tx_ring_empty_descs`: the kernel found the tx ring empty.
    pub tx_ring_empty_descs: u64,
    /// Descriptors in the fill ring now.
    pub fill_ring: u32,
    /// Descriptors in the rx ring now.
    pub rx_ring: u32,
    /// Descriptors in the tx ring now.
    pub tx_ring: u32,
    /// Descriptors in the completion ring now.
    pub completion: u32,
}

/// Where the UMEM's frames are: steer-xdp's frame census, taken live (the
/// places are approximate while packets move, exact when idle).
pub type FrameCounters = steer_xdp::FrameCensus;

/// Flow-delivery counters of the whole engine: what the budget admitted,
/// refused and evicted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HubStats {
    /// Flows offered to a listener.
    pub accepted: u64,
    /// New flows dropped because the listener's backlog was full.
    pub accept_drops: u64,
    /// Flows open now (not yet dropped by the application nor evicted).
    pub open: u64,
    /// The most flows open at once (the resolved budget).
    pub max_flows: u64,
    /// New flows refused: the budget was full of recently active flows.
    pub refused: u64,
    /// New flows refused: their source was over its new-flow rate.
    pub rate_limited: u64,
    /// New flows refused: the application was falling behind (new flows
    /// waited too long to be read; see `overload`).
    pub overload: u64,
    /// Flows evicted for room that had no two-way traffic.
    pub evicted_unassured: u64,
    /// Assured flows evicted for room, the least recently active.
    pub evicted_idle: u64,
    /// Failures of the application's per-flow resources it reported
    /// ([`Flow::count_backend_error`](crate::flows::Flow::count_backend_error)).
    pub backend_errors: u64,
    /// The XDP new-flow gate is closed now (the budget is full: new flows'
    /// first datagrams drop in XDP, retries pass).
    pub gate_closed: bool,
    /// Times the gate closed.
    pub gate_closings: u64,
    /// New flows' first datagrams dropped at the closed gate, in XDP.
    pub gate_dropped: u64,
    /// Retries let through the closed gate.
    pub gate_retries: u64,
}

impl HubStats {
    /// Flows evicted for room, for any reason.
    pub fn evicted(&self) -> u64 {
        self.evicted_unassured + self.evicted_idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_serializes_flat_and_reads_back() {
        let row = CpuCounters {
            cpu: 3,
            core: LocalStats {
                rx: 10,
                processed: 9,
                time_squeeze: 1,
                ..Default::default()
            },
            tx: 8,
            app_dropped: 1,
            ..Default::default()
        };
        let v = serde_json::to_value(row).unwrap();
        assert_eq!(v["rx"], 10);
        assert_eq!(v["time_squeeze"], 1);
        assert_eq!(v["tx"], 8);
        assert_eq!(serde_json::from_value::<CpuCounters>(v).unwrap(), row);
        assert_eq!(row.drops(), 1);
    }

    #[test]
    fn the_frame_places_keep_their_names_on_the_wire() {
        let mut live = LiveStats::empty("eth1");
        live.frames.total = 9;
        live.frames.completion = 2;
        let v = serde_json::to_value(&live).unwrap();
        assert_eq!(
            v["frames"].to_string(),
            "{\"total\":9,\"free\":0,\"fill_ring\":0,\"kernel_rx\":0,\"rx_ring\":0,\
             \"held\":0,\"tx_ring\":0,\"kernel_tx\":0,\"completion\":2}"
        );
        // A snapshot without some places reads them as 0.
        let frames: FrameCounters = serde_json::from_str("{\"total\":3}").unwrap();
        assert_eq!((frames.total, frames.free), (3, 0));
    }
}
