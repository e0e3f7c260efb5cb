//! A deterministic replay of steer's whole steering decision, for what-if
//! questions such as "how many steering updates would the LLC rule save on
//! this traffic, on this machine?".
//!
//! A [`Sim`] drives the real [`DesiredCpuTable`] (with its update
//! [`Policy`]), one real [`RxFlowTable`] per rx queue with its
//! [`SteerHook`], and the dispatcher's decision around them, over a model of
//! the rings draining in simulated time. Feed it timed [`Event`]s in time
//! order (packet arrivals on rx queues, consumption records, CPU hotplug);
//! read the counts from [`Sim::report`].
//!
//! Per packet, as [`Dispatcher`](crate::dispatch::Dispatcher) does it (pins
//! and the flow limit are not simulated):
//! 1. the desired CPU: the flow's entry in the desired table if its CPU is
//!    online and has a worker, else plain RPS ([`RpsMode`]);
//! 2. the rx-queue table moves the flow there only once the old CPU's ring
//!    has passed the flow's last queued packet (`last_qtail`), calling the
//!    hook on each move (a steering update) or holding the move back;
//! 3. the fast path: the target is the dispatcher's own CPU and nothing of
//!    the flow is still queued: handled inline; otherwise queued to the
//!    target's ring (dropped when full).
//!
//! Rx queue `i` is dispatched on the `i % n`-th worker CPU, as the runtime
//! wires it. The queue model (in `queues.rs`): each CPU handles what is
//! queued to it in arrival order, `service_ns` per packet, so a ring's head
//! passes a packet when the CPU has handled it. The flow tables' clock is
//! the simulated time in milliseconds, and idle rx-table entries expire as
//! in the engine ([`SimConfig::flow_idle_ms`]).
//!
//! Consumption comes from the events, or from a [`ConsumerModel`] that
//! records a CPU for each packet once it is handled (in `consumer.rs`).
//!
//! [`load`] is a different model on the same premises: worker load over
//! time for a workload of flows with rates and costs, hash placement against
//! the load balancer.
//!
//! Invariants: the same events and settings always give the same report;
//! nothing here reads a clock or does I/O; an event earlier than the one
//! before it is taken at the current time (time never runs backwards).
//!
//! ```
//! use std::sync::Arc;
//! use steer_core::cpu::{CpuLayout, CpuSet};
//! use steer_core::policy::Policy;
//! use steer_core::sim::{Event, Sim, SimConfig};
//!
//! let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap()); // LLCs {0,1}, {2,3}
//! let cfg = SimConfig { workers: CpuSet::first(4), queues: 1, policy: Policy::LlcAffinity, ..SimConfig::default() };
//! let mut sim = Sim::new(cfg, layout).unwrap();
//! let flow = 0x1234_5678;
//! sim.apply(0, Event::Consume { hash: flow, cpu: 2, allowed: None }).unwrap();
//! sim.apply(1_000, Event::Packet { hash: flow, rxq: 0 }).unwrap();  // placed on CPU 2: one hook call
//! sim.apply(2_000, Event::Consume { hash: flow, cpu: 3, allowed: None }).unwrap(); // same LLC: suppressed
//! sim.apply(3_000, Event::Packet { hash: flow, rxq: 0 }).unwrap();
//! let r = sim.finish();
//! assert_eq!((r.packets, r.rx.hook_calls, r.suppressed, r.steered_out), (2, 1, 1, 2));
//! ```

mod consumer;
pub mod load;
mod queues;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

pub use consumer::{BadModel, ConsumerModel};

use crate::cpu::{CpuId, CpuLayout, CpuSet};
use crate::hook::{CountingHook, SteerHook};
use crate::policy::{Policy, RecordOutcome, WriteReason};
use crate::runtime::RpsMode;
use crate::table::{DesiredCpuTable, RxFlowStats, RxFlowTable, SteerAction, TableError, Tick};
use consumer::Consumers;
use queues::Queues;

/// Buckets of each rx-queue table a sweep looks at per simulated
/// millisecond (the engine's budget per idle tick).
const SWEEP_BUDGET: usize = 64;

/// Settings of a simulation: the engine's, plus the queue model's.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// CPUs with a worker (each drains its rings, dispatchers run on them).
    pub workers: CpuSet,
    /// Rx queues (`0..queues`); queue `i` is dispatched on the `i % n`-th
    /// worker.
    pub queues: usize,
    /// The desired table's update rule.
    pub policy: Policy,
    /// The same-CPU fast path.
    pub fast_path: bool,
    /// Where flows nobody recorded a CPU for go.
    pub rps: RpsMode,
    /// Slots of the desired-CPU table (a power of two).
    pub desired_entries: usize,
    /// Buckets of each rx-queue table (a power of two).
    pub rx_table_entries: usize,
    /// Slots of each (rx queue, worker) ring.
    pub ring_capacity: usize,
    /// CPU time to handle one packet (ns).
    pub service_ns: u64,
    /// An rx-table entry idle this long (ms) expires; 0: never.
    pub flow_idle_ms: Tick,
    /// Who consumes the flows.
    pub consumer: ConsumerModel,
    /// Seed of the random consumer models.
    pub seed: u64,
}

impl Default for SimConfig {
    /// One worker on CPU 0, one rx queue, the engine's defaults (LLC rule,
    /// fast path on, RPS spread, 4096-slot tables, 1024-slot rings, flows
    /// idle 10 s expire), 1 us per packet, consumption from the events.
    fn default() -> Self {
        Self {
            workers: CpuSet::first(1),
            queues: 1,
            policy: Policy::LlcAffinity,
            fast_path: true,
            rps: RpsMode::Spread,
            desired_entries: 4096,
            rx_table_entries: 4096,
            ring_capacity: 1024,
            service_ns: 1_000,
            flow_idle_ms: 10_000,
            consumer: ConsumerModel::Trace,
            seed: 0,
        }
    }
}

/// One thing that happens to the simulated engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A packet of flow `hash` arrives on rx queue `rxq` (hash 0: no flow,
    /// handled on the dispatcher's CPU).
    Packet {
        /// The flow hash the dispatcher computes.
        hash: u32,
        /// The rx queue.
        rxq: u32,
    },
    /// A thread on `cpu` (allowed on `allowed`, default every online CPU)
    /// consumed flow `hash`: a record into the desired table.
    Consume {
        /// The flow hash (non-zero).
        hash: u32,
        /// The consuming thread's CPU.
        cpu: CpuId,
        /// The thread's allowed CPUs.
        allowed: Option<CpuSet>,
    },
    /// CPU `cpu` goes offline or comes back.
    Online {
        /// The CPU.
        cpu: CpuId,
        /// Its new state.
        online: bool,
    },
}

/// Why a simulation refused its settings or an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// A table size is not a power of two (or out of range).
    Table(TableError),
    /// No worker CPU, or one outside the layout.
    BadWorkers(String),
    /// Zero rx queues, or a ring capacity of 0.
    BadSize(&'static str),
    /// The rx queue is not one of `0..queues`.
    NoSuchQueue {
        /// The queue given.
        rxq: u32,
        /// How many there are.
        queues: usize,
    },
    /// The CPU is not in the layout.
    NoSuchCpu {
        /// The CPU given.
        cpu: CpuId,
        /// The layout's CPU count.
        nr_cpus: usize,
    },
    /// A consumption of flow hash 0 ("no hash").
    NoHash,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Table(e) => write!(f, "{e}"),
            Self::BadWorkers(why) => write!(f, "bad worker CPUs: {why}"),
            Self::BadSize(what) => write!(f, "{what} must be at least 1"),
            Self::NoSuchQueue { rxq, queues } => write!(
                f,
                "rx queue {rxq} does not exist (queues 0-{})",
                queues.saturating_sub(1)
            ),
            Self::NoSuchCpu { cpu, nr_cpus } => write!(
                f,
                "CPU {cpu} is not in the topology (CPUs 0-{})",
                nr_cpus.saturating_sub(1)
            ),
            Self::NoHash => f.write_str("flow hash 0 means \"no hash\" and cannot be recorded"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<TableError> for SimError {
    fn from(e: TableError) -> Self {
        Self::Table(e)
    }
}

/// What a simulation counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SimReport {
    /// Records into the desired table (consumption events or model reads).
    pub records: u64,
    /// Records that found the flow already on that CPU.
    pub unchanged: u64,
    /// Same-flow changes the policy did not write.
    pub suppressed: u64,
    /// Desired-table writes, by [`WriteReason`] (index `reason as usize`).
    #[serde(skip)]
    pub written: [u64; WriteReason::ALL.len()],
    /// Packets that arrived.
    pub packets: u64,
    /// Distinct flow hashes among them.
    pub flows: u64,
    /// Packets without a flow (hash 0), handled on the dispatcher's CPU.
    pub no_flow: u64,
    /// Packets handled inline on the dispatcher's CPU (fast path).
    pub fast_path: u64,
    /// Packets queued to the dispatcher's own CPU's ring.
    pub queued_local: u64,
    /// Packets queued to another CPU's ring.
    pub steered_out: u64,
    /// Packets dropped because the target ring was full.
    pub ring_drops: u64,
    /// Packets with neither a desired nor a current CPU, handled inline.
    pub no_target: u64,
    /// Hook calls that placed a flow for the first time (or after expiry).
    pub first_placements: u64,
    /// Hook calls that moved a flow from one CPU to another.
    pub moves: u64,
    /// The rx-queue tables' counters, summed (`hook_calls` is every
    /// steering update: first placements and moves).
    #[serde(skip)]
    pub rx: RxFlowStats,
    /// The most packets one ring held at once.
    pub deepest_ring: u64,
    /// Consumer-thread migrations (the `migrate` model).
    pub migrations: u64,
    /// Simulated time from the first to the last event (ns).
    pub duration_ns: u64,
}

impl SimReport {
    /// Desired-table writes for `reason`.
    pub fn written(&self, reason: WriteReason) -> u64 {
        self.written[reason as usize]
    }

    /// All desired-table writes.
    pub fn updates(&self) -> u64 {
        self.written.iter().sum()
    }
}

/// The simulated engine; see the module docs.
#[derive(Debug)]
pub struct Sim<H: SteerHook = CountingHook> {
    cfg: SimConfig,
    layout: Arc<CpuLayout>,
    desired: DesiredCpuTable,
    tables: Vec<RxFlowTable<H>>,
    /// The dispatcher CPU of each rx queue.
    own: Vec<CpuId>,
    /// The RPS CPUs (Spread: the workers; Local: none).
    rps_cpus: Vec<CpuId>,
    queues: Queues,
    consumers: Consumers,
    flows: HashSet<u32>,
    counts: SimReport,
    start_ns: Option<u64>,
    now_ns: u64,
    tick: Tick,
}

impl Sim<CountingHook> {
    /// A simulation with a [`CountingHook`] on every rx queue.
    pub fn new(cfg: SimConfig, layout: Arc<CpuLayout>) -> Result<Self, SimError> {
        Self::with_hooks(cfg, layout, |_| CountingHook::default())
    }
}

impl<H: SteerHook> Sim<H> {
    /// A simulation whose rx queue `i` calls `hook(i)`'s hook on moves. The
    /// layout's online state is the simulation's: [`Event::Online`] changes
    /// it.
    pub fn with_hooks(
        cfg: SimConfig,
        layout: Arc<CpuLayout>,
        mut hook: impl FnMut(u32) -> H,
    ) -> Result<Self, SimError> {
        let nr = layout.nr_cpus();
        if cfg.workers.is_empty() {
            return Err(SimError::BadWorkers("none given".into()));
        }
        if let Some(bad) = cfg.workers.iter().find(|&c| c >= nr) {
            return Err(SimError::BadWorkers(format!(
                "CPU {bad} is not in the topology (CPUs 0-{})",
                nr - 1
            )));
        }
        if cfg.queues == 0 {
            return Err(SimError::BadSize("the number of rx queues"));
        }
        if cfg.ring_capacity == 0 {
            return Err(SimError::BadSize("the ring capacity"));
        }
        let queues = u32::try_from(cfg.queues).map_err(|_| SimError::BadSize("rx queues"))?;
        let desired = DesiredCpuTable::with_policy(cfg.desired_entries, nr, cfg.policy)?;
        let tables = (0..queues)
            .map(|q| RxFlowTable::with_hook(q, cfg.rx_table_entries, hook(q)))
            .collect::<Result<Vec<_>, _>>()?;
        let workers: Vec<CpuId> = cfg.workers.iter().collect();
        let own = (0..cfg.queues)
            .map(|i| workers[i % workers.len()])
            .collect();
        let rps_cpus = match cfg.rps {
            RpsMode::Spread => workers,
            RpsMode::Local => Vec::new(),
        };
        Ok(Self {
            queues: Queues::new(
                cfg.queues,
                nr,
                cfg.workers,
                cfg.ring_capacity,
                cfg.service_ns,
            ),
            consumers: Consumers::new(cfg.consumer, &cfg.workers, cfg.seed),
            cfg,
            layout,
            desired,
            tables,
            own,
            rps_cpus,
            flows: HashSet::new(),
            counts: SimReport::default(),
            start_ns: None,
            now_ns: 0,
            tick: 0,
        })
    }

    /// The settings.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The layout (with the simulation's online state).
    pub fn layout(&self) -> &Arc<CpuLayout> {
        &self.layout
    }

    /// The desired-CPU table.
    pub fn desired(&self) -> &DesiredCpuTable {
        &self.desired
    }

    /// Rx queue `rxq`'s flow table (and through it, its hook).
    pub fn rx_table(&self, rxq: u32) -> Option<&RxFlowTable<H>> {
        self.tables.get(rxq as usize)
    }

    /// The CPU whose worker dispatches rx queue `rxq`.
    pub fn dispatcher_cpu(&self, rxq: u32) -> Option<CpuId> {
        self.own.get(rxq as usize).copied()
    }

    /// The counts so far (packets still queued are not yet consumed; see
    /// [`Sim::finish`]).
    pub fn report(&self) -> SimReport {
        let mut r = self.counts;
        r.flows = self.flows.len() as u64;
        r.rx = RxFlowStats::default();
        for t in &self.tables {
            let s = t.stats();
            r.rx.moves += s.moves;
            r.rx.held_back += s.held_back;
            r.rx.hook_calls += s.hook_calls;
            r.rx.hook_errors += s.hook_errors;
            r.rx.expired += s.expired;
            r.rx.hook_removes += s.hook_removes;
        }
        r.deepest_ring = self.queues.deepest();
        r.migrations = self.consumers.migrations;
        r.duration_ns = self.now_ns - self.start_ns.unwrap_or(self.now_ns);
        r
    }

    /// Lets every queued packet be handled (and consumed, under a model),
    /// then reports.
    pub fn finish(mut self) -> SimReport {
        self.drain_until(u64::MAX);
        self.report()
    }

    /// Applies `event` at time `t_ns` (ns, any origin; times must not go
    /// backwards: an earlier time is taken as the current one).
    pub fn apply(&mut self, t_ns: u64, event: Event) -> Result<(), SimError> {
        let t = t_ns.max(self.now_ns);
        let start = *self.start_ns.get_or_insert(t);
        self.drain_until(t);
        self.set_now(t);
        self.counts.duration_ns = t - start;
        match event {
            Event::Packet { hash, rxq } => self.packet(hash, rxq),
            Event::Consume { hash, cpu, allowed } => {
                // A model replaces the trace's consumption.
                if self.consumers.model() == ConsumerModel::Trace {
                    self.record(hash, cpu, allowed)?;
                } else {
                    self.check_cpu(cpu)?;
                }
                Ok(())
            }
            Event::Online { cpu, online } => {
                self.check_cpu(cpu)?;
                self.layout.set_online(cpu, online);
                Ok(())
            }
        }
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<CpuId, SimError> {
        let nr_cpus = self.layout.nr_cpus();
        if cpu < nr_cpus {
            Ok(cpu)
        } else {
            Err(SimError::NoSuchCpu { cpu, nr_cpus })
        }
    }

    fn record(&mut self, hash: u32, cpu: CpuId, allowed: Option<CpuSet>) -> Result<(), SimError> {
        if hash == 0 {
            return Err(SimError::NoHash);
        }
        let cpu = self.check_cpu(cpu)?;
        let allowed = allowed.unwrap_or_else(|| self.layout.online_cpus());
        let outcome = self
            .desired
            .record(hash, cpu, &allowed, &self.layout)
            .map_err(|_| SimError::NoSuchCpu {
                cpu,
                nr_cpus: self.layout.nr_cpus(),
            })?;
        self.counts.records += 1;
        match outcome {
            RecordOutcome::Written(r) => self.counts.written[r as usize] += 1,
            RecordOutcome::Unchanged => self.counts.unchanged += 1,
            RecordOutcome::Suppressed => self.counts.suppressed += 1,
        }
        Ok(())
    }

    /// Moves the clock to `t` (already drained): the tables' tick, and
    /// expiry sweeps for the milliseconds that passed.
    fn set_now(&mut self, t: u64) {
        self.now_ns = t;
        let tick = (t / 1_000_000) as Tick;
        if tick == self.tick {
            return;
        }
        let passed = tick.wrapping_sub(self.tick) as usize;
        self.tick = tick;
        if self.cfg.flow_idle_ms == 0 {
            return;
        }
        let queues = &self.queues;
        for (rxq, table) in self.tables.iter_mut().enumerate() {
            let rxq = rxq as u32;
            let heads = |c: CpuId| queues.dequeued(rxq, c);
            let budget = passed
                .saturating_mul(SWEEP_BUDGET)
                .min(table.len() + SWEEP_BUDGET);
            table.sweep(&self.layout, &heads, tick, self.cfg.flow_idle_ms, budget);
        }
    }

    /// Takes every completion due by `until`; under a consumer model each
    /// handled packet is read (recorded) at its completion time.
    fn drain_until(&mut self, until: u64) {
        while let Some(done) = self.queues.next_done(until) {
            if done.hash == 0 {
                continue;
            }
            if let Some(cpu) = self
                .consumers
                .reader(done.hash, done.cpu, done.at, &self.layout)
            {
                // A model names only worker CPUs of the layout: cannot fail.
                let _ = self.record(done.hash, cpu, None);
            }
        }
    }

    fn usable(&self, cpu: CpuId) -> bool {
        self.layout.is_online(cpu) && self.queues.has_worker(cpu)
    }

    /// The dispatcher's plain RPS choice (`Dispatcher::rps_cpu`).
    fn rps_cpu(&self, hash: u32, own: CpuId) -> Option<CpuId> {
        let n = self.rps_cpus.len();
        if n > 0 {
            let start = ((u64::from(hash) * n as u64) >> 32) as usize;
            let spread = (0..n)
                .map(|i| self.rps_cpus[(start + i) % n])
                .find(|&c| self.usable(c));
            if spread.is_some() {
                return spread;
            }
        }
        Some(own).filter(|&c| self.usable(c)).or_else(|| {
            // Own CPU offline: any CPU with a worker, by hash
            // (`Dispatcher::any_usable_cpu`).
            let usable = || (0..self.layout.nr_cpus()).filter(|&c| self.usable(c));
            let n = usable().count();
            usable().nth(((u64::from(hash) * n as u64) >> 32) as usize)
        })
    }

    fn packet(&mut self, hash: u32, rxq: u32) -> Result<(), SimError> {
        let Some(&own) = self.own.get(rxq as usize) else {
            return Err(SimError::NoSuchQueue {
                rxq,
                queues: self.cfg.queues,
            });
        };
        let now = self.now_ns;
        self.counts.packets += 1;
        if hash == 0 {
            self.counts.no_flow += 1;
            self.queues.inline(own, 0, now);
            return Ok(());
        }
        self.flows.insert(hash);
        let desired = self
            .desired
            .lookup(hash)
            .filter(|&c| self.usable(c))
            .or_else(|| self.rps_cpu(hash, own));
        let queues = &self.queues;
        let heads = |c: CpuId| queues.dequeued(rxq, c);
        let Some(table) = self.tables.get_mut(rxq as usize) else {
            return Ok(());
        };
        let steered = table.steer(hash, desired, &self.layout, &heads, self.tick);
        if let SteerAction::Moved { from } = steered.action {
            if from.is_some() {
                self.counts.moves += 1;
            } else {
                self.counts.first_placements += 1;
            }
        }
        let Some(cpu) = steered.cpu else {
            self.counts.no_target += 1;
            self.queues.inline(own, hash, now);
            return Ok(());
        };
        if cpu == own && self.cfg.fast_path && !table.has_queued(steered.bucket, &heads) {
            self.counts.fast_path += 1;
            self.queues.inline(own, hash, now);
            return Ok(());
        }
        if !self.queues.has_worker(cpu) {
            self.counts.no_target += 1;
            self.queues.inline(own, hash, now);
            return Ok(());
        }
        match self.queues.enqueue(rxq, cpu, hash, now) {
            Some(tail) => {
                if let Some(table) = self.tables.get_mut(rxq as usize) {
                    table.note_enqueued(steered.bucket, tail);
                }
                if cpu == own {
                    self.counts.queued_local += 1;
                } else {
                    self.counts.steered_out += 1;
                }
            }
            None => self.counts.ring_drops += 1,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
