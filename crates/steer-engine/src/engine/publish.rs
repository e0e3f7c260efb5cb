//! What a running engine publishes about itself: [`Publisher`] holds shared
//! handles on the engine's counter blocks, sockets and settings, and builds
//! a [`LiveStats`] from them on request (for [`Engine::live_stats`], the
//! stats socket and `/metrics`).
//!
//! Invariant: building a snapshot reads the per-CPU blocks with relaxed
//! loads and takes each socket's lock once (kernel statistics, ledger and
//! ring occupancy), never anything per packet. The publisher holds `Arc`s
//! of the sockets: whoever holds one must drop it before the engine
//! releases the sockets (the engine stops its observer first).
//!
//! [`Engine::live_stats`]: super::Engine::live_stats

use std::sync::Arc;
use std::time::Instant;

use steer_core::cpu::CpuSet;
use steer_core::dispatch::Shared;
use steer_core::policy::WriteReason;
use steer_core::runtime::{WorkerState, WorkerStates};
use steer_xdp::{ActiveModes, BindMode, FrameCensus, LedgerSnapshot, RingCensus, XdpMode};

use super::counters::EngineCounters;
use crate::observe::{
    CpuCounters, DesiredCounters, LiveStats, SocketCounters, WorkerStatus, FORMAT_VERSION,
};
use steer_xdp::frames::{lock, SharedSocket};

/// Shared handles on everything a snapshot reads.
pub(super) struct Publisher {
    pub(super) interface: String,
    pub(super) cpus: CpuSet,
    pub(super) shared: Shared,
    pub(super) counters: Arc<EngineCounters>,
    pub(super) sockets: Vec<SharedSocket>,
    pub(super) total_frames: u32,
    pub(super) modes: ActiveModes,
    pub(super) started: Instant,
    /// The application (its flow counters, if it delivers flows).
    pub(super) app: Arc<dyn super::Application>,
    /// The workers' states.
    pub(super) workers: WorkerStates,
    /// The slow path's counters.
    pub(super) slow: Arc<super::slow_path::SlowPath>,
}

impl Publisher {
    /// The engine now.
    pub(super) fn snapshot(&self) -> LiveStats {
        let per_cpu_core = self.shared.stats.snapshot();
        let per_cpu = self
            .cpus
            .iter()
            .map(|cpu| {
                let engine = self.counters.load(cpu);
                CpuCounters {
                    cpu,
                    core: per_cpu_core
                        .per_cpu
                        .iter()
                        .find(|(c, _)| *c == cpu)
                        .map(|(_, s)| *s)
                        .unwrap_or_default(),
                    tx: engine.tx,
                    tx_dropped: engine.tx_dropped,
                    consumed: engine.consumed,
                    app_dropped: engine.app_dropped,
                }
            })
            .collect();
        let record = self.shared.desired.stats();
        let desired = DesiredCounters {
            updates: WriteReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), record.written(*r)))
                .collect(),
            suppressed: record.suppressed,
        };
        let mut ledgers = LedgerSnapshot::default();
        let mut rings = RingCensus::default();
        let sockets = self
            .sockets
            .iter()
            .map(|socket| {
                let mut s = lock(socket);
                let kernel = s.kernel_stats().unwrap_or_default();
                let ledger = s.counters();
                let ring = s.ring_census();
                let queue = s.queue();
                drop(s);
                ledgers = ledgers + ledger;
                rings = rings + ring;
                SocketCounters {
                    queue,
                    rx_packets: ledger.rx_frames,
                    tx_packets: ledger.tx_frames,
                    wakeups: ledger.wakeups,
                    multi_rx_packets: ledger.multi_rx,
                    multi_tx_packets: ledger.multi_tx,
                    multi_refused: ledger.multi_refused,
                    rx_dropped: kernel.rx_dropped,
                    rx_invalid_descs: kernel.rx_invalid_descs,
                    rx_ring_full: kernel.rx_ring_full,
                    rx_fill_ring_empty_descs: kernel.rx_fill_ring_empty,
                    tx_invalid_descs: kernel.tx_invalid_descs,
                    tx_ring_empty_descs: kernel.tx_ring_empty,
                    fill_ring: ring.fill_ring,
                    rx_ring: ring.rx_ring,
                    tx_ring: ring.tx_ring,
                    completion: ring.completion,
                }
            })
            .collect();
        LiveStats {
            version: FORMAT_VERSION,
            interface: self.interface.clone(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            policy: self.shared.desired.policy().get().name().into(),
            fast_path: self
                .shared
                .switches
                .fast_path
                .load(std::sync::atomic::Ordering::Relaxed),
            flow_limit: self
                .shared
                .switches
                .flow_limit
                .load(std::sync::atomic::Ordering::Relaxed),
            xdp_mode: match self.modes.xdp {
                XdpMode::Native => "native",
                XdpMode::Generic => "generic",
                XdpMode::Auto => "auto",
            }
            .into(),
            bind_mode: match self.modes.bind {
                BindMode::Copy => "copy",
                BindMode::ZeroCopy => "zerocopy",
                BindMode::Auto => "auto",
            }
            .into(),
            per_cpu,
            desired,
            sockets,
            frames: FrameCensus::new(self.total_frames, ledgers, rings),
            balance: self.shared.balance.stats(),
            flows: self.app.flow_stats(),
            workers: self
                .workers
                .reports()
                .into_iter()
                .map(|r| WorkerStatus {
                    cpu: r.cpu,
                    up: r.state == WorkerState::Running,
                    panic: match r.state {
                        WorkerState::Panicked(msg) => Some(msg),
                        _ => r.last_panic,
                    },
                    restarts: r.restarts,
                })
                .collect(),
            slow_path: self.slow.stats(),
        }
    }
}
