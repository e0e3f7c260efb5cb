//! What the engine reports: per-CPU rows (steer-core's dispatch counters
//! plus the engine's transmit and verdict counters), each worker's busy
//! time and the load balancer's counters, the live table printed once a
//! second, and the report [`Engine::stop`](super::Engine::stop) returns with
//! the frame census.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use steer_core::balance::{BalanceStats, MoveReason};
use steer_core::cpu::{CpuId, CpuSet};
use steer_core::dispatch::Shared;
use steer_core::policy::{Policy, WriteReason};
use steer_core::runtime::WorkerState;
use steer_core::stats::LocalStats;
use steer_core::table::RecordStats;
use steer_xdp::{FrameCensus, ProgramStats, SocketStats};

use super::counters::{EngineCounters, WorkerCounts};

/// One CPU's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuRow {
    /// The CPU.
    pub cpu: CpuId,
    /// Dispatch and worker counters (steer-core).
    pub core: LocalStats,
    /// Transmit and handler verdicts.
    pub engine: WorkerCounts,
}

impl CpuRow {
    /// Frames dropped by steer on this CPU for any reason: ring full, flow
    /// limit, malformed, worker gone, tx ring full, refused by the handler,
    /// handler panicked.
    pub fn drops(&self) -> u64 {
        self.core.dropped
            + self.core.worker_gone_drops
            + self.core.flow_limit_drops
            + self.core.malformed
            + self.engine.tx_dropped
            + self.engine.app_dropped
            + self.engine.app_panicked
    }

    fn add(&mut self, o: &CpuRow) {
        self.core.add(&o.core);
        self.engine.add(&o.engine);
    }

    fn json(&self) -> Value {
        let mut v = serde_json::to_value(self.core).unwrap_or_default();
        if let (Value::Object(m), Value::Object(e)) = (
            &mut v,
            serde_json::to_value(self.engine).unwrap_or_default(),
        ) {
            m.insert("cpu".into(), json!(self.cpu));
            m.extend(e);
            m.insert("drops".into(), json!(self.drops()));
        }
        v
    }
}

/// A point-in-time view of a running engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStats {
    /// One row per worker CPU.
    pub per_cpu: Vec<CpuRow>,
    /// The sum of the rows.
    pub total: CpuRow,
    /// Desired-table writes and suppressed same-flow changes.
    pub desired: RecordStats,
    /// The update policy now.
    pub policy: Policy,
    /// Whether the fast path is on.
    pub fast_path: bool,
    /// The load balancer's counters (moves by reason, elephants left in
    /// place, ...).
    pub balance: BalanceStats,
    /// Since the engine started.
    pub elapsed: Duration,
    /// Packets that spanned several UMEM frames (multi-buffer AF_XDP).
    pub multi_buffer: MultiBufferStats,
    /// The slow path: fragmented datagrams the kernel reassembled, read
    /// from the engine's kernel sockets and answered through them.
    pub slow_path: crate::observe::SlowPathStats,
}

/// Multi-buffer packets (spanning several UMEM frames), summed over the
/// port's sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MultiBufferStats {
    /// Received (gathered for the handler).
    pub received: u64,
    /// Transmitted (put on a tx ring as a chain of frames).
    pub transmitted: u64,
    /// Refused: longer than a chain may be, no frames to build a reply
    /// from, or no room on the tx ring for the whole chain.
    pub refused: u64,
}

impl From<steer_xdp::LedgerSnapshot> for MultiBufferStats {
    fn from(l: steer_xdp::LedgerSnapshot) -> Self {
        Self {
            received: l.multi_rx,
            transmitted: l.multi_tx,
            refused: l.multi_refused,
        }
    }
}

impl EngineStats {
    /// The counters of the engine on `cpus` running on `shared`.
    pub(crate) fn collect(
        cpus: &CpuSet,
        shared: &Shared,
        counters: &EngineCounters,
        elapsed: Duration,
    ) -> Self {
        let snap = shared.stats.snapshot();
        let per_cpu: Vec<CpuRow> = cpus
            .iter()
            .map(|cpu| CpuRow {
                cpu,
                core: snap
                    .per_cpu
                    .iter()
                    .find(|(c, _)| *c == cpu)
                    .map(|(_, s)| *s)
                    .unwrap_or_default(),
                engine: counters.load(cpu),
            })
            .collect();
        let mut total = CpuRow::default();
        for r in &per_cpu {
            total.add(r);
        }
        Self {
            per_cpu,
            total,
            desired: shared.desired.stats(),
            policy: shared.desired.policy().get(),
            fast_path: shared.switches.fast_path.load(Ordering::Relaxed),
            balance: shared.balance.stats(),
            elapsed,
            multi_buffer: MultiBufferStats::default(),
            slow_path: crate::observe::SlowPathStats::default(),
        }
    }

    /// Each worker's busy time as a fraction of the time since `previous`
    /// (or since the start), at most 1: the load the balancer sees.
    ///
    /// ```
    /// # use steer_engine::engine::EngineStats;
    /// fn show(now: &EngineStats, before: &EngineStats) {
    ///     for (cpu, busy) in now.busy(Some(before)) {
    ///         println!("CPU {cpu}: {:.0}% busy", busy * 100.0);
    ///     }
    ///     println!("max/mean {:.2}", now.load_max_over_mean(Some(before)));
    /// }
    /// ```
    pub fn busy(&self, previous: Option<&EngineStats>) -> Vec<(CpuId, f64)> {
        let span = self
            .elapsed
            .saturating_sub(previous.map_or(Duration::ZERO, |p| p.elapsed))
            .as_nanos() as f64;
        self.per_cpu
            .iter()
            .map(|r| {
                let before = previous
                    .and_then(|p| p.per_cpu.iter().find(|x| x.cpu == r.cpu))
                    .map_or(0, |x| x.core.busy_ns);
                let busy = r.core.busy_ns.saturating_sub(before) as f64;
                // A round counts when it ends: one that began before
                // `previous` can push a short interval past 1.
                (
                    r.cpu,
                    if span > 0.0 {
                        (busy / span).min(1.0)
                    } else {
                        0.0
                    },
                )
            })
            .collect()
    }

    /// The busiest worker's busy time over the mean (1: balanced), since
    /// `previous` (or the start).
    pub fn load_max_over_mean(&self, previous: Option<&EngineStats>) -> f64 {
        let busy = self.busy(previous);
        let mean = busy.iter().map(|b| b.1).sum::<f64>() / busy.len().max(1) as f64;
        let max = busy.iter().map(|b| b.1).fold(0.0, f64::max);
        if mean > 0.0 {
            max / mean
        } else {
            1.0
        }
    }

    /// Steering updates: flow moves between CPUs that called the steering
    /// hook (the `ndo_rx_flow_steer` analog).
    pub fn steering_updates(&self) -> u64 {
        self.total.core.hook_calls
    }

    /// The live table; with `previous` (taken `interval` earlier) rx and tx
    /// also show per-second rates.
    ///
    /// ```
    /// # use steer_engine::engine::EngineStats;
    /// fn show(now: &EngineStats, before: &EngineStats) {
    ///     println!("{}", now.table(Some(before)));
    /// }
    /// ```
    pub fn table(&self, previous: Option<&EngineStats>) -> String {
        let secs = previous
            .map(|p| self.elapsed.saturating_sub(p.elapsed).as_secs_f64())
            .filter(|s| *s > 0.0);
        let rate = |now: u64, before: Option<u64>| -> String {
            match (secs, before) {
                (Some(s), Some(b)) => format!("{:.0}", now.saturating_sub(b) as f64 / s),
                _ => "-".into(),
            }
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>5} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>5}",
            "cpu",
            "rx",
            "rx/s",
            "tx",
            "tx/s",
            "fast",
            "st_in",
            "st_out",
            "drops",
            "updates",
            "squeeze",
            "busy%"
        );
        let busy = self.busy(previous);
        let mean_busy = busy.iter().map(|b| b.1).sum::<f64>() / busy.len().max(1) as f64;
        let rows = self.per_cpu.iter().chain(std::iter::once(&self.total));
        for (i, r) in rows.enumerate() {
            let before = previous.and_then(|p| {
                if i < self.per_cpu.len() {
                    p.per_cpu.iter().find(|x| x.cpu == r.cpu)
                } else {
                    Some(&p.total)
                }
            });
            let label = if i < self.per_cpu.len() {
                r.cpu.to_string()
            } else {
                "all".into()
            };
            // The total row shows the mean.
            let b = busy.get(i).map_or(mean_busy, |b| b.1);
            let _ = writeln!(
                out,
                "{:>5} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>5.0}",
                label,
                r.core.rx,
                rate(r.core.rx, before.map(|b| b.core.rx)),
                r.engine.tx,
                rate(r.engine.tx, before.map(|b| b.engine.tx)),
                r.core.fast_path,
                r.core.steered_in,
                r.core.steered_out,
                r.drops(),
                r.core.hook_calls,
                r.core.time_squeeze,
                b * 100.0,
            );
        }
        let _ = write!(
            out,
            "policy {}, fast path {}, desired-table writes {} (suppressed {})",
            self.policy.name(),
            if self.fast_path { "on" } else { "off" },
            self.desired.updates(),
            self.desired.suppressed,
        );
        let bal = &self.balance;
        if bal.on || bal.moves() > 0 {
            let _ = write!(
                out,
                "\nbalancer {}: moves {} (same LLC {}, cross LLC {}), released {}, elephants {}, busy max/mean {:.2}",
                if bal.on { "on" } else { "off" },
                bal.moves(),
                bal.moves_same_llc,
                bal.moves_cross_llc,
                bal.released,
                bal.elephants,
                self.load_max_over_mean(previous),
            );
        }
        out
    }

    /// The counters as JSON.
    pub fn to_json_value(&self) -> Value {
        let mut by_reason = serde_json::Map::new();
        for r in WriteReason::ALL {
            by_reason.insert(r.name().into(), json!(self.desired.written(r)));
        }
        json!({
            "elapsed_s": self.elapsed.as_secs_f64(),
            "policy": self.policy.name(),
            "fast_path": self.fast_path,
            "steering_updates": self.steering_updates(),
            "desired_table": {
                "updates": self.desired.updates(),
                "suppressed": self.desired.suppressed,
                "by_reason": by_reason,
            },
            "balancer": {
                "on": self.balance.on,
                "rounds": self.balance.rounds,
                "moves": self.balance.moves(),
                "moves_by_reason": MoveReason::ALL
                    .iter()
                    .map(|&r| (r.name().to_string(), json!(self.balance.moves_for(r))))
                    .collect::<serde_json::Map<_, _>>(),
                "released": self.balance.released,
                "elephants": self.balance.elephants,
                "elephant_rounds": self.balance.elephant_rounds,
                "last_max_over_mean": self.balance.max_over_mean_milli as f64 / 1000.0,
            },
            "worker_load": {
                "busy": self.busy(None).iter().map(|(cpu, b)| json!({"cpu": cpu, "busy": b})).collect::<Vec<_>>(),
                "max_over_mean": self.load_max_over_mean(None),
            },
            "multi_buffer": {
                "received": self.multi_buffer.received,
                "transmitted": self.multi_buffer.transmitted,
                "refused": self.multi_buffer.refused,
            },
            "slow_path": self.slow_path,
            "per_cpu": self.per_cpu.iter().map(CpuRow::json).collect::<Vec<_>>(),
            "total": self.total.json(),
        })
    }
}

/// What [`Engine::stop`](super::Engine::stop) returns.
#[derive(Debug, Clone)]
pub struct EngineReport {
    /// The final counters.
    pub stats: EngineStats,
    /// Where every UMEM frame was after the stop.
    pub census: FrameCensus,
    /// Frames the spare pool could not take (always 0 unless a bug).
    pub spare_lost: u64,
    /// The kernel's AF_XDP statistics, summed over sockets.
    pub kernel: SocketStats,
    /// How each worker ended.
    pub workers: Vec<(CpuId, WorkerState)>,
    /// The XDP program's counters just before the stop.
    pub program: Option<ProgramStats>,
    /// The trace recorded ([`EngineBuilder::record_trace`](super::EngineBuilder::record_trace)), if any.
    pub trace: Option<crate::trace::TraceSummary>,
}

impl EngineReport {
    /// Every frame is accounted for and back with the sockets: the census
    /// balances, nothing is held by the application, nothing was lost.
    pub fn census_ok(&self) -> bool {
        self.census.check().is_ok() && self.census.held == 0 && self.spare_lost == 0
    }

    /// The report as JSON (the echo server's `--stats-json`).
    pub fn to_json_value(&self) -> Value {
        let c = &self.census;
        let mut v = self.stats.to_json_value();
        if let Value::Object(m) = &mut v {
            m.insert(
                "frames".into(),
                json!({
                    "total": c.total,
                    "free": c.free,
                    "fill_ring": c.fill_ring,
                    "kernel_rx": c.kernel_rx,
                    "rx_ring": c.rx_ring,
                    "held": c.held,
                    "tx_ring": c.tx_ring,
                    "kernel_tx": c.kernel_tx,
                    "completion": c.completion,
                    "spare_lost": self.spare_lost,
                    "balanced": self.census_ok(),
                    "check": match c.check() { Ok(()) => "ok".to_string(), Err(e) => e },
                }),
            );
            let k = &self.kernel;
            m.insert(
                "kernel_xsk".into(),
                json!({
                    "rx_dropped": k.rx_dropped,
                    "rx_invalid_descs": k.rx_invalid_descs,
                    "rx_ring_full": k.rx_ring_full,
                    "rx_fill_ring_empty": k.rx_fill_ring_empty,
                    "tx_invalid_descs": k.tx_invalid_descs,
                    "tx_ring_empty": k.tx_ring_empty,
                }),
            );
            m.insert(
                "workers".into(),
                json!(self
                    .workers
                    .iter()
                    .map(|(cpu, s)| json!({"cpu": cpu, "state": format!("{s:?}")}))
                    .collect::<Vec<_>>()),
            );
            if let Some(p) = &self.program {
                m.insert(
                    "xdp_program".into(),
                    json!({
                        "redirected": p.redirected,
                        "passed": p.passed,
                        "redirect_failed": p.redirect_failed,
                        "dropped": p.dropped,
                    }),
                );
            }
            if let Some(t) = &self.trace {
                m.insert(
                    "trace".into(),
                    json!({
                        "path": t.path.display().to_string(),
                        "events": t.events,
                        "dropped": t.dropped,
                        "over_limit": t.over_limit,
                        "error": t.error,
                    }),
                );
            }
        }
        v
    }
}
