//! A deterministic, discrete-time model of worker load, to compare plain
//! hash placement (RPS) with the [`Balancer`] on a
//! workload of flows with rates and per-packet costs.
//!
//! The model, per step (default 1 ms):
//! 1. churn: a fraction of the hash-placed flows get a new hash (a flow
//!    ends, another starts), so placement keeps changing;
//! 2. moves the balancer decided complete once the old worker's queue has
//!    passed the flow's packets: when fewer than one packet of the unit is
//!    expected in it (`rate x queued time < 1`), the `last_qtail` rule of the
//!    rx-queue table seen at the scale of a step; until then the unit stays
//!    on its old worker (counted as held). A unit on its rx queue's own CPU
//!    runs inline (the fast path) and queues nothing: it moves at once;
//! 3. each unit's packets arrive (Poisson, or the exact fluid rate) and
//!    join its worker's queue, `cost` ns each; a worker serves one step's
//!    worth of CPU time per step; a queue longer than the ring drops;
//! 4. every round (default 5 ms) the balancer sees what the engine would:
//!    each worker's busy time and packets, each unit's packets, and plans
//!    moves.
//!
//! Units are what the engine moves: one bucket of an rx queue's flow table.
//! A flow's rx queue comes from a second hash of its flow hash (the NIC's
//! RSS), its bucket from the low bits, and a new bucket starts on the CPU of
//! its rx queue ([`RpsMode::Local`], one rx queue per worker by default) or
//! on the RPS CPU of its first flow ([`RpsMode::Spread`]); flows sharing a
//! bucket share its CPU, as in the rx-queue table. Pinned flows and flows
//! consumed by an application thread are units of their own on their CPU,
//! never movable.
//!
//! The report compares workers over a window after a warm-up: max/mean of
//! the offered load, the moves (per second and as the share of flows moved
//! per second), and a queueing-delay estimate per worker (M/G/1,
//! Pollaczek-Khinchine, from its packet rate and cost moments; none when a
//! worker is saturated) plus the mean queued time of the fluid queue.
//!
//! Invariants: the same workload, settings and seed give the same report;
//! both placements of [`run_pair`] see the same arrivals; every flow is in
//! exactly one unit and every unit on exactly one worker at every step
//! ([`LoadModel::check`]); nothing here reads a clock or does I/O.
//!
//! ```
//! use steer_core::balance::BalanceConfig;
//! use steer_core::cpu::{CpuLayout, CpuSet};
//! use steer_core::sim::load::{run_pair, Cost, LoadConfig, Workload};
//! use std::sync::Arc;
//!
//! let layout = Arc::new(CpuLayout::uniform(8, 4).unwrap());
//! let workload = Workload::zipf(400, 1.1, 10_000, 1e6, Cost::Fixed(1000.0), 1);
//! let cfg = LoadConfig {
//!     workers: CpuSet::first(8),
//!     duration_ns: 2_000_000_000,
//!     warmup_ns: 1_000_000_000,
//!     ..LoadConfig::default()
//! };
//! let (hash, balanced) = run_pair(&cfg, BalanceConfig::default(), &workload, layout).unwrap();
//! assert!(balanced.max_over_mean < hash.max_over_mean);
//! ```

mod workload;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

pub use workload::{Cost, FlowSpec, Placement, Workload, WorkloadError};

use super::consumer::SplitMix;
use crate::balance::{
    unit_id, BalanceConfig, Balancer, MoveReason, Round, UnitId, UnitSample, WorkerSample,
};
use crate::cpu::{CpuId, CpuLayout, CpuSet};
use crate::runtime::RpsMode;

/// Settings of a load model run.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadConfig {
    /// CPUs with a worker.
    pub workers: CpuSet,
    /// Rx queues (0: one per worker); queue `i` is dispatched on the
    /// `i % n`-th worker.
    pub queues: usize,
    /// Where a new bucket starts (`Local`: its rx queue's CPU; `Spread`: the
    /// RPS CPU of its first flow).
    pub rps: RpsMode,
    /// Buckets of each rx queue's flow table (a power of two).
    pub rx_table_entries: usize,
    /// Length of a step (ns).
    pub step_ns: u64,
    /// Simulated time (ns).
    pub duration_ns: u64,
    /// The report's window starts here (ns).
    pub warmup_ns: u64,
    /// Scale every rate so the mean worker load is this fraction of a CPU
    /// (`None`: the workload's rates as they are).
    pub load: Option<f64>,
    /// The balancer, or `None` for hash placement only.
    pub balance: Option<BalanceConfig>,
    /// Time between two balancer rounds (ns).
    pub interval_ns: u64,
    /// Packets a worker's queue holds before it drops (its rings).
    pub queue_packets: u64,
    /// The same-CPU fast path: a unit on its rx queue's CPU runs inline.
    pub fast_path: bool,
    /// Fraction of the hash-placed flows that get a new hash per second.
    pub churn_per_s: f64,
    /// Poisson arrivals (true) or the exact fluid rate (false).
    pub poisson: bool,
    /// Seed of arrivals and churn.
    pub seed: u64,
}

impl Default for LoadConfig {
    /// Two workers on CPUs 0-1, one rx queue each (RPS local), 4096-bucket
    /// tables, 1 ms steps for 10 s with a 2 s warm-up, rates scaled to a
    /// mean load of 0.6, no balancer (5 ms rounds when there is one), 1024
    /// packets of queue per worker, fast path on, no churn, Poisson
    /// arrivals, seed 1.
    fn default() -> Self {
        Self {
            workers: CpuSet::first(2),
            queues: 0,
            rps: RpsMode::Local,
            rx_table_entries: 4096,
            step_ns: 1_000_000,
            duration_ns: 10_000_000_000,
            warmup_ns: 2_000_000_000,
            load: Some(0.6),
            balance: None,
            interval_ns: 5_000_000,
            queue_packets: 1024,
            fast_path: true,
            churn_per_s: 0.0,
            poisson: true,
            seed: 1,
        }
    }
}

/// Why a model refused its settings or workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No worker, or one outside the layout.
    BadWorkers(String),
    /// A size or time is out of range.
    BadSetting(String),
    /// A flow is pinned or consumed on a CPU without a worker.
    NoWorker(CpuId),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadWorkers(why) => write!(f, "bad worker CPUs: {why}"),
            Self::BadSetting(why) => f.write_str(why),
            Self::NoWorker(cpu) => write!(
                f,
                "a flow is pinned or consumed on CPU {cpu}, which has no worker"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// What a run measured, over the window after the warm-up unless said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    /// Whether the balancer ran.
    pub balancer: bool,
    /// Worker count.
    pub workers: usize,
    /// Flows in the workload.
    pub flows: usize,
    /// Units (buckets, pinned flows) that carried packets in the window.
    pub units: usize,
    /// Simulated seconds, and the window's.
    pub seconds: f64,
    /// The window's length (s).
    pub window_s: f64,
    /// Mean worker load (fraction of a CPU asked for).
    pub mean_load: f64,
    /// The most loaded worker's load.
    pub max_load: f64,
    /// `max_load / mean_load`: 1 is perfect balance.
    pub max_over_mean: f64,
    /// The best any placement of whole units could do: the biggest unit's
    /// load over the mean, at least 1.
    pub bound: f64,
    /// Moves completed over the whole run.
    pub moves: u64,
    /// Of those, to a worker behind the same LLC.
    pub moves_same_llc: u64,
    /// Of those, to another LLC.
    pub moves_cross_llc: u64,
    /// Flows carried by the completed moves.
    pub moved_flows: u64,
    /// Moves per second over the whole run.
    pub moves_per_s: f64,
    /// Flows moved per second, in % of the flows, over the whole run.
    pub moved_flows_pct_per_s: f64,
    /// Moves per second in the window (steady state).
    pub window_moves_per_s: f64,
    /// Flows moved per second in the window, in % of the flows.
    pub window_moved_flows_pct_per_s: f64,
    /// Steps a decided move waited for its old queue to pass the unit's
    /// packets.
    pub held_steps: u64,
    /// Distinct units the balancer left in place as elephants.
    pub elephants: usize,
    /// Workers asked for a CPU or more.
    pub saturated: usize,
    /// Packet-weighted mean M/G/1 queueing delay (us); `None` when a
    /// worker is saturated.
    pub queue_delay_us: Option<f64>,
    /// The worst worker's M/G/1 queueing delay (us); `None` when saturated.
    pub worst_queue_delay_us: Option<f64>,
    /// Packet-weighted mean time queued in the fluid queue (us).
    pub backlog_us: f64,
    /// The worst worker's mean time queued in the fluid queue (us).
    pub worst_backlog_us: f64,
    /// Packets dropped by full queues, in % of those that arrived.
    pub dropped_pct: f64,
    /// Each worker's load in the window.
    pub per_worker: Vec<(CpuId, f64)>,
}

#[derive(Debug, Clone)]
struct FlowState {
    spec: FlowSpec,
    unit: usize,
}

#[derive(Debug, Clone)]
struct Unit {
    id: UnitId,
    /// Its rx queue (`None`: a pinned or app-consumed flow).
    rxq: Option<usize>,
    cpu: CpuId,
    pending: Option<CpuId>,
    movable: bool,
    flows: usize,
    /// Sums over its flows: packets/s, ns/s, ns^2/s.
    rate: f64,
    work: f64,
    work2: f64,
    /// Fractional packets (fluid arrivals).
    carry: f64,
    /// Packets this round.
    round_packets: u64,
    /// Work in the window (ns).
    window_work: f64,
}

#[derive(Debug, Clone, Default)]
struct WorkerRun {
    /// Queued work (ns).
    backlog: f64,
    round_busy: f64,
    round_packets: u64,
    window_work: f64,
    window_work2: f64,
    window_packets: u64,
    window_backlog: f64,
    window_arrived: u64,
}

/// The model during a run; see the module docs. [`LoadModel::run`] does a
/// whole run; [`LoadModel::step`] one step, for tests that check each.
#[derive(Debug)]
pub struct LoadModel {
    cfg: LoadConfig,
    layout: Arc<CpuLayout>,
    flows: Vec<FlowState>,
    /// Indices of the hash-placed flows (churn picks among them).
    hashed: Vec<usize>,
    units: Vec<Unit>,
    by_id: HashMap<UnitId, usize>,
    workers: Vec<CpuId>,
    /// CPU -> index in `workers`.
    slot: Vec<Option<usize>>,
    /// Rx queue -> dispatcher CPU.
    own: Vec<CpuId>,
    run: Vec<WorkerRun>,
    balancer: Option<Balancer>,
    rng: SplitMix,
    mean_cost: f64,
    mask: usize,
    t_ns: u64,
    churn_carry: f64,
    moves: [u64; 2],
    moved_flows: u64,
    window_moves: u64,
    window_moved_flows: u64,
    held_steps: u64,
    elephants: HashSet<UnitId>,
    arrived: u64,
    dropped: f64,
    /// Work queued by units and taken by workers in the last step (they
    /// must agree).
    step_unit_work: f64,
    step_worker_work: f64,
}

/// Runs the model once with `cfg.balance` as given.
pub fn run(
    cfg: &LoadConfig,
    workload: &Workload,
    layout: Arc<CpuLayout>,
) -> Result<LoadReport, LoadError> {
    let mut m = LoadModel::new(cfg.clone(), workload, layout)?;
    m.run();
    Ok(m.report())
}

/// Runs the model twice on the same arrivals: hash placement only, then
/// with the balancer `balance`.
pub fn run_pair(
    cfg: &LoadConfig,
    balance: BalanceConfig,
    workload: &Workload,
    layout: Arc<CpuLayout>,
) -> Result<(LoadReport, LoadReport), LoadError> {
    let hash = run(
        &LoadConfig {
            balance: None,
            ..cfg.clone()
        },
        workload,
        Arc::clone(&layout),
    )?;
    let balanced = run(
        &LoadConfig {
            balance: Some(balance),
            ..cfg.clone()
        },
        workload,
        layout,
    )?;
    Ok((hash, balanced))
}

/// The RSS queue of a flow: a second hash of its flow hash, scaled.
fn rss_queue(hash: u32, queues: usize) -> usize {
    let mut h = hash ^ (hash >> 16);
    h = h.wrapping_mul(0x45d9_f3b5);
    h ^= h >> 16;
    ((u64::from(h) * queues as u64) >> 32) as usize
}

impl LoadModel {
    /// A model of `workload` on `cfg.workers` of `layout`.
    pub fn new(
        cfg: LoadConfig,
        workload: &Workload,
        layout: Arc<CpuLayout>,
    ) -> Result<Self, LoadError> {
        let nr = layout.nr_cpus();
        let workers: Vec<CpuId> = cfg.workers.iter().collect();
        if workers.is_empty() {
            return Err(LoadError::BadWorkers("none given".into()));
        }
        if let Some(bad) = workers.iter().find(|&&c| c >= nr) {
            return Err(LoadError::BadWorkers(format!(
                "CPU {bad} is not in the topology (CPUs 0-{})",
                nr - 1
            )));
        }
        let bad = |why: &str| Err(LoadError::BadSetting(why.into()));
        if cfg.step_ns == 0 || cfg.interval_ns == 0 {
            return bad("the step and the balancer's interval must be at least 1 ns");
        }
        if cfg.warmup_ns >= cfg.duration_ns {
            return bad("the warm-up must be shorter than the run");
        }
        if !cfg.rx_table_entries.is_power_of_two() {
            return bad("the rx table's entries must be a power of two");
        }
        if !(cfg.churn_per_s.is_finite() && cfg.churn_per_s >= 0.0) {
            return bad("churn must be >= 0");
        }
        if cfg.load.is_some_and(|l| !(l.is_finite() && l >= 0.0)) {
            return bad("the load must be >= 0");
        }
        let mut slot = vec![None; nr];
        for (i, &c) in workers.iter().enumerate() {
            slot[c] = Some(i);
        }
        let queues = if cfg.queues == 0 {
            workers.len()
        } else {
            cfg.queues
        };
        let own = (0..queues).map(|q| workers[q % workers.len()]).collect();
        let mut specs = workload.clone();
        if let Some(load) = cfg.load {
            specs.scale_to(load * workers.len() as f64);
        }
        let rate: f64 = specs.flows.iter().map(|f| f.rate_pps).sum();
        let mean_cost = if rate > 0.0 {
            specs.work() / rate
        } else {
            1000.0
        };
        let mut m = Self {
            balancer: cfg.balance.map(Balancer::new),
            rng: SplitMix::new(cfg.seed),
            mask: cfg.rx_table_entries - 1,
            cfg,
            layout,
            flows: Vec::with_capacity(specs.flows.len()),
            hashed: Vec::new(),
            units: Vec::new(),
            by_id: HashMap::new(),
            workers,
            slot,
            own,
            run: Vec::new(),
            mean_cost,
            t_ns: 0,
            churn_carry: 0.0,
            moves: [0; 2],
            moved_flows: 0,
            window_moves: 0,
            window_moved_flows: 0,
            held_steps: 0,
            elephants: HashSet::new(),
            arrived: 0,
            dropped: 0.0,
            step_unit_work: 0.0,
            step_worker_work: 0.0,
        };
        m.run = vec![WorkerRun::default(); m.workers.len()];
        for (i, spec) in specs.flows.iter().enumerate() {
            let unit = match spec.placement {
                Placement::Hash => {
                    m.hashed.push(i);
                    m.bucket_unit(spec.hash)
                }
                Placement::Pin(cpu) | Placement::App(cpu) => {
                    if m.slot.get(cpu).copied().flatten().is_none() {
                        return Err(LoadError::NoWorker(cpu));
                    }
                    m.units.push(Unit::new((1 << 63) | i as u64, None, cpu));
                    m.units.len() - 1
                }
            };
            m.flows.push(FlowState { spec: *spec, unit });
            m.units[unit].add(spec);
        }
        Ok(m)
    }

    /// The unit of the bucket `hash` falls in, created on its default CPU.
    fn bucket_unit(&mut self, hash: u32) -> usize {
        let rxq = rss_queue(hash, self.own.len());
        let id = unit_id(rxq as u32, hash as usize & self.mask);
        if let Some(&u) = self.by_id.get(&id) {
            return u;
        }
        let cpu = match self.cfg.rps {
            RpsMode::Local => self.own[rxq],
            RpsMode::Spread => {
                let n = self.workers.len() as u64;
                self.workers[((u64::from(hash) * n) >> 32) as usize]
            }
        };
        self.units.push(Unit::new(id, Some(rxq), cpu));
        self.by_id.insert(id, self.units.len() - 1);
        self.units.len() - 1
    }

    /// Simulated time so far (ns).
    pub fn now_ns(&self) -> u64 {
        self.t_ns
    }

    /// Runs to the configured duration.
    pub fn run(&mut self) {
        while self.t_ns < self.cfg.duration_ns {
            self.step();
        }
    }

    /// One step (module docs).
    pub fn step(&mut self) {
        let dt = self.cfg.step_ns as f64;
        self.churn(dt);
        let in_window = self.t_ns >= self.cfg.warmup_ns;
        self.complete_moves(in_window);

        // Arrivals.
        let mut unit_work = 0.0;
        let mut step_work = vec![(0.0f64, 0.0f64, 0u64); self.workers.len()];
        for u in &mut self.units {
            if u.rate <= 0.0 {
                continue;
            }
            let lambda = u.rate * dt * 1e-9;
            let packets = if self.cfg.poisson {
                poisson(&mut self.rng, lambda)
            } else {
                u.carry += lambda;
                let p = u.carry.floor();
                u.carry -= p;
                p as u64
            };
            if packets == 0 {
                continue;
            }
            let work = packets as f64 * u.work / u.rate;
            let work2 = packets as f64 * u.work2 / u.rate;
            u.round_packets += packets;
            unit_work += work;
            if in_window {
                u.window_work += work;
            }
            if let Some(w) = self.slot.get(u.cpu).copied().flatten() {
                let s = &mut step_work[w];
                s.0 += work;
                s.1 += work2;
                s.2 += packets;
            }
        }
        // Service.
        let limit = self.cfg.queue_packets as f64 * self.mean_cost;
        let mut worker_work = 0.0;
        for (r, &(work, work2, packets)) in self.run.iter_mut().zip(&step_work) {
            worker_work += work;
            r.backlog += work;
            let served = r.backlog.min(dt);
            r.backlog -= served;
            r.round_busy += served;
            r.round_packets += packets;
            self.arrived += packets;
            let mut dropped = 0.0;
            if r.backlog > limit {
                dropped = (r.backlog - limit) / self.mean_cost;
                r.backlog = limit;
            }
            self.dropped += dropped;
            if in_window {
                r.window_work += work;
                r.window_work2 += work2;
                r.window_packets += packets;
                r.window_backlog += r.backlog;
                r.window_arrived += packets;
            }
        }
        self.step_unit_work = unit_work;
        self.step_worker_work = worker_work;
        self.t_ns += self.cfg.step_ns;
        if self.t_ns % self.cfg.interval_ns < self.cfg.step_ns {
            self.balance_round();
        }
    }

    fn churn(&mut self, dt: f64) {
        if self.cfg.churn_per_s <= 0.0 || self.hashed.is_empty() {
            return;
        }
        self.churn_carry += self.cfg.churn_per_s * self.hashed.len() as f64 * dt * 1e-9;
        while self.churn_carry >= 1.0 {
            self.churn_carry -= 1.0;
            let i = self.hashed[self.rng.below(self.hashed.len())];
            let hash = loop {
                let h = self.rng.next_u64() as u32;
                if h != 0 {
                    break h;
                }
            };
            let spec = self.flows[i].spec;
            let old = self.flows[i].unit;
            self.units[old].remove(&spec);
            let spec = FlowSpec { hash, ..spec };
            let new = self.bucket_unit(hash);
            self.units[new].add(&spec);
            self.flows[i] = FlowState { spec, unit: new };
        }
    }

    /// Decided moves whose old queue has passed the unit's packets complete.
    fn complete_moves(&mut self, in_window: bool) {
        for u in &mut self.units {
            let Some(to) = u.pending else { continue };
            let inline = self.cfg.fast_path && u.rxq.is_some_and(|q| self.own[q] == u.cpu);
            let queued_ns = self
                .slot
                .get(u.cpu)
                .copied()
                .flatten()
                .map_or(0.0, |w| self.run[w].backlog);
            if !inline && u.rate * queued_ns * 1e-9 >= 1.0 {
                self.held_steps += 1;
                continue;
            }
            let reason = if self.layout.shares_llc(u.cpu, to) {
                MoveReason::SameLlc
            } else {
                MoveReason::CrossLlc
            };
            self.moves[reason as usize] += 1;
            self.moved_flows += u.flows as u64;
            if in_window {
                self.window_moves += 1;
                self.window_moved_flows += u.flows as u64;
            }
            u.cpu = to;
            u.pending = None;
        }
    }

    fn balance_round(&mut self) {
        let Some(balancer) = self.balancer.as_mut() else {
            for r in &mut self.run {
                r.round_busy = 0.0;
                r.round_packets = 0;
            }
            return;
        };
        let workers: Vec<WorkerSample> = self
            .workers
            .iter()
            .zip(&mut self.run)
            .map(|(&cpu, r)| {
                let s = WorkerSample {
                    cpu,
                    busy_ns: r.round_busy as u64,
                    packets: r.round_packets,
                };
                r.round_busy = 0.0;
                r.round_packets = 0;
                s
            })
            .collect();
        let units: Vec<UnitSample> = self
            .units
            .iter_mut()
            .filter(|u| u.round_packets > 0)
            .map(|u| {
                let s = UnitSample {
                    id: u.id,
                    cpu: u.cpu,
                    packets: u.round_packets,
                    movable: u.movable,
                };
                u.round_packets = 0;
                s
            })
            .collect();
        let plan = balancer.plan(
            &Round {
                interval_ns: self.cfg.interval_ns,
                workers: &workers,
                units: &units,
            },
            &self.layout,
        );
        for e in &plan.elephants {
            self.elephants.insert(e.unit);
        }
        for mv in &plan.moves {
            if let Some(&u) = self.by_id.get(&mv.unit) {
                let unit = &mut self.units[u];
                // The balancer only plans movable units; a pin never moves.
                if unit.movable {
                    unit.pending = (mv.to != unit.cpu).then_some(mv.to);
                }
            }
        }
    }

    /// Checks the model's invariants: every flow is in exactly one unit
    /// and counted there once, every unit is on one worker CPU, pinned and
    /// application-consumed flows are on their CPU, pending moves are only
    /// of movable units, and the last step's work was queued on workers
    /// exactly as the units produced it.
    pub fn check(&self) -> Result<(), String> {
        let mut flows_in = vec![0usize; self.units.len()];
        for (i, f) in self.flows.iter().enumerate() {
            let Some(u) = self.units.get(f.unit) else {
                return Err(format!("flow {i} points at no unit"));
            };
            flows_in[f.unit] += 1;
            match f.spec.placement {
                Placement::Pin(c) | Placement::App(c) if u.cpu != c || u.movable => {
                    return Err(format!("flow {i} is claimed by CPU {c} but on {}", u.cpu))
                }
                _ => {}
            }
        }
        for (u, unit) in self.units.iter().enumerate() {
            if unit.flows != flows_in[u] {
                return Err(format!(
                    "unit {u} counts {} flows, {} point at it",
                    unit.flows, flows_in[u]
                ));
            }
            if self.slot.get(unit.cpu).copied().flatten().is_none() {
                return Err(format!("unit {u} is on CPU {}, no worker", unit.cpu));
            }
            if unit.pending.is_some() && !unit.movable {
                return Err(format!("unit {u} is not movable but has a move pending"));
            }
        }
        let (a, b) = (self.step_unit_work, self.step_worker_work);
        if (a - b).abs() > 1e-6 * a.max(1.0) {
            return Err(format!("units queued {a} ns of work, workers took {b}"));
        }
        Ok(())
    }

    /// The CPU each flow's packets go to now.
    pub fn owners(&self) -> Vec<CpuId> {
        self.flows.iter().map(|f| self.units[f.unit].cpu).collect()
    }

    /// What the run measured so far.
    pub fn report(&self) -> LoadReport {
        let seconds = self.t_ns as f64 * 1e-9;
        let window_ns = self.t_ns.saturating_sub(self.cfg.warmup_ns) as f64;
        let window_s = window_ns * 1e-9;
        let window_steps = (window_ns / self.cfg.step_ns as f64).max(1.0);
        let loads: Vec<f64> = self
            .run
            .iter()
            .map(|r| r.window_work / window_ns.max(1.0))
            .collect();
        let n = loads.len().max(1) as f64;
        let mean_load = loads.iter().sum::<f64>() / n;
        let max_load = loads.iter().copied().fold(0.0, f64::max);
        let ratio = |x: f64| if mean_load > 0.0 { x / mean_load } else { 1.0 };
        let biggest = self
            .units
            .iter()
            .map(|u| u.window_work / window_ns.max(1.0))
            .fold(0.0, f64::max);
        let (mut pk_sum, mut wait_sum, mut worst_wait) = (0.0, 0.0, 0.0f64);
        let (mut backlog_sum, mut worst_backlog) = (0.0, 0.0f64);
        let mut saturated = 0;
        for (r, &rho) in self.run.iter().zip(&loads) {
            let backlog_us = r.window_backlog / window_steps / 1e3;
            worst_backlog = worst_backlog.max(backlog_us);
            backlog_sum += backlog_us * r.window_packets as f64;
            pk_sum += r.window_packets as f64;
            if rho >= 1.0 {
                saturated += 1;
                continue;
            }
            if r.window_packets == 0 {
                continue;
            }
            // Pollaczek-Khinchine: W = lambda E[S^2] / (2 (1 - rho)).
            let lambda = r.window_packets as f64 / window_s.max(1e-12);
            let es2 = r.window_work2 / r.window_packets as f64 * 1e-18;
            let wait_us = lambda * es2 / (2.0 * (1.0 - rho)) * 1e6;
            worst_wait = worst_wait.max(wait_us);
            wait_sum += wait_us * r.window_packets as f64;
        }
        let flows = self.flows.len();
        let per_s = |x: u64, s: f64| if s > 0.0 { x as f64 / s } else { 0.0 };
        let pct = |x: u64, s: f64| {
            if flows > 0 {
                per_s(x, s) * 100.0 / flows as f64
            } else {
                0.0
            }
        };
        LoadReport {
            balancer: self.balancer.is_some(),
            workers: self.workers.len(),
            flows,
            units: self.units.iter().filter(|u| u.window_work > 0.0).count(),
            seconds,
            window_s,
            mean_load,
            max_load,
            max_over_mean: ratio(max_load),
            bound: ratio(biggest).max(1.0),
            moves: self.moves.iter().sum(),
            moves_same_llc: self.moves[MoveReason::SameLlc as usize],
            moves_cross_llc: self.moves[MoveReason::CrossLlc as usize],
            moved_flows: self.moved_flows,
            moves_per_s: per_s(self.moves.iter().sum(), seconds),
            moved_flows_pct_per_s: pct(self.moved_flows, seconds),
            window_moves_per_s: per_s(self.window_moves, window_s),
            window_moved_flows_pct_per_s: pct(self.window_moved_flows, window_s),
            held_steps: self.held_steps,
            elephants: self.elephants.len(),
            saturated,
            queue_delay_us: (saturated == 0 && pk_sum > 0.0).then(|| wait_sum / pk_sum),
            worst_queue_delay_us: (saturated == 0).then_some(worst_wait),
            backlog_us: if pk_sum > 0.0 {
                backlog_sum / pk_sum
            } else {
                0.0
            },
            worst_backlog_us: worst_backlog,
            dropped_pct: if self.arrived > 0 {
                self.dropped * 100.0 / self.arrived as f64
            } else {
                0.0
            },
            per_worker: self.workers.iter().copied().zip(loads).collect(),
        }
    }
}

impl Unit {
    /// A bucket of rx queue `rxq` (movable), or a claimed flow (`None`).
    fn new(id: UnitId, rxq: Option<usize>, cpu: CpuId) -> Self {
        Self {
            id,
            rxq,
            cpu,
            pending: None,
            movable: rxq.is_some(),
            flows: 0,
            rate: 0.0,
            work: 0.0,
            work2: 0.0,
            carry: 0.0,
            round_packets: 0,
            window_work: 0.0,
        }
    }

    fn add(&mut self, f: &FlowSpec) {
        self.flows += 1;
        self.rate += f.rate_pps;
        self.work += f.rate_pps * f.cost_ns;
        self.work2 += f.rate_pps * f.cost_ns * f.cost_ns;
    }

    fn remove(&mut self, f: &FlowSpec) {
        self.flows -= 1;
        if self.flows == 0 {
            // Exactly zero, whatever the rounding of the sums.
            (self.rate, self.work, self.work2) = (0.0, 0.0, 0.0);
        } else {
            self.rate = (self.rate - f.rate_pps).max(0.0);
            self.work = (self.work - f.rate_pps * f.cost_ns).max(0.0);
            self.work2 = (self.work2 - f.rate_pps * f.cost_ns * f.cost_ns).max(0.0);
        }
    }
}

/// A Poisson variate of mean `lambda`: Knuth's product of uniforms for
/// small means, the normal approximation above 30.
fn poisson(rng: &mut SplitMix, lambda: f64) -> u64 {
    if lambda <= 0.0 {
        return 0;
    }
    if lambda < 30.0 {
        let limit = (-lambda).exp();
        let mut k = 0;
        let mut p = rng.unit();
        while p > limit {
            k += 1;
            p *= rng.unit();
        }
        return k;
    }
    // Box-Muller.
    let u1 = rng.unit().max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (lambda + lambda.sqrt() * z).round().max(0.0) as u64
}
