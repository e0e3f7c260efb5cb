//! Pinned workers, one per configured CPU, and the ring matrix between them.
//!
//! A [`Runtime`] owns one worker thread per CPU of its set, pinned through
//! the caller's [`Setup::prepare_thread`]. Every rx queue ([`RxSource`]) has a
//! [`Dispatcher`](crate::dispatch::Dispatcher) run by one worker (queue `i` on the `i`-th CPU, round
//! robin), and every dispatcher has one SPSC ring to every worker. A worker
//! loop, like NAPI plus `process_backlog`:
//! 1. polls its rx queues and dispatches each batch (inline fast path, or to
//!    the target's ring, ringing its doorbell);
//! 2. drains each inbound ring with
//!    [`Consumer::consume_unpublished`](crate::ring::Consumer::consume_unpublished),
//!    at most `batch` packets per ring per round (a full budget with packets
//!    left counts a `time_squeeze`);
//! 3. flushes the handler ([`Handler::flush`](crate::dispatch::Handler::flush):
//!    staged replies go on the tx ring), then publishes each drained ring's
//!    head, once per ring per round: a head passes a packet only after the
//!    handler returned *and* its reply left, which is what `last_qtail`
//!    compares against (in zero-copy mode, where the handler reports
//!    [`Handler::tx_progress`](crate::dispatch::Handler::tx_progress), only
//!    once the device completed the reply: heads are held as checkpoints,
//!    `hold.rs`, and published by a later round);
//! 4. once per tick (a millisecond at most): maintenance, flow-table
//!    expiry over a few buckets (more when idle), never per packet;
//! 5. when idle, unless busy-polling: spins a little (or, with
//!    [`RuntimeConfig::adaptive`], for a window that adapts to how long
//!    its sleeps last) and sleeps on its [`Doorbell`].
//!
//! Each worker reads the clock once per round and adds the length of the
//! rounds that did work to its CPU's `busy_ns` counter. A balancer thread
//! (`balance.rs`) turns those and the dispatchers' per-bucket counts into
//! moves of unclaimed flows off overloaded workers while the load balancer
//! is on ([`RuntimeConfig::balance`], switchable at run time through
//! `Shared::balance`); it sleeps while it is off.
//!
//! A worker whose handler panics is restarted in place, up to
//! [`RuntimeConfig::worker_restarts`]: the packet it panicked on is lost
//! (it counts as processed: the handler had it), the replies its handler staged before
//! go out before any ring head passes them, a fresh
//! [`Setup::handler`] takes over on the same CPU with the same rings and rx
//! queues, and the rest of an interrupted rx batch is dispatched with it. No
//! flow moves, so none is reordered. Each restart is counted in
//! [`WorkerStates::reports`].
//!
//! A worker past its restart limit dies: its CPU is marked offline (the
//! LLC rule's "old CPU invalid" case re-steers its flows on the next record),
//! the frames still queued to it are returned to the pool and counted in
//! `worker_gone_drops`, its rx queues are adopted by a surviving worker, and its rings
//! are dropped so every dispatcher routes around it. The rest keep running.
//!
//! The state the workers share with the application (the desired-CPU
//! table, the layout, stats, pins and switches: a [`Shared`]) is built
//! before the start, by
//! [`RuntimeConfig::shared`], so the application can hand it out (to
//! recorders, flow delivery) before any packet arrives; [`Runtime::start`]
//! runs on it. [`Runtime::start_with_layout`] does both in one call.
//!
//! [`Runtime::stop`] (or drop) asks every worker to finish: each handles
//! what is queued to it, returns its un-dispatched frames, and exits.
//!
//! Where things are: this file holds the settings ([`RuntimeConfig`]), the
//! errors and [`Runtime`] itself (start, the ring matrix, stop); `source.rs`
//! the traits the application implements ([`RxSource`], [`Setup`]);
//! `balance.rs` the load balancer's thread;
//! `worker.rs` the worker thread (start-up, the loop, adoption of orphaned rx
//! queues, finish, panic recovery).

mod balance;
mod coalesce;
mod hold;
mod idle;
mod restart;
mod source;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

pub use coalesce::Coalesce;
pub use idle::{AdaptiveSpin, BUDGET_PERIOD};
pub use restart::RestartLimit;
pub use source::{RxSource, Setup};

use crate::balance::BalanceConfig;
use crate::cpu::{CpuId, CpuLayout, CpuSet};
use crate::dispatch::{FlowLimit, Shared};
use crate::policy::Policy;
use crate::ring::{self, Producer};
use crate::stats::StatsSnapshot;
use crate::table::{RxFlowTable, TableError, Tick};
use crate::wake::Doorbell;
use balance::BalancerThread;
use worker::{Inbound, Part, PartSeed, Startup};

/// Settings of a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// CPUs to run workers on.
    pub cpus: CpuSet,
    /// Slots of each (dispatcher, worker) ring; a power of two.
    pub ring_capacity: usize,
    /// Slots of the desired-CPU table; a power of two (read by
    /// [`RuntimeConfig::shared`]).
    pub desired_entries: usize,
    /// Buckets of each rx-queue table; a power of two.
    pub rx_table_entries: usize,
    /// Starting update policy, switchable at run time (read by
    /// [`RuntimeConfig::shared`]).
    pub policy: Policy,
    /// Where flows nobody has recorded a CPU for go.
    #[doc(alias("rps_cpus", "rps_map"))]
    pub rps: RpsMode,
    /// Start with the same-CPU fast path on (read by
    /// [`RuntimeConfig::shared`]).
    pub fast_path: bool,
    /// Start with the per-CPU flow limit on (read by
    /// [`RuntimeConfig::shared`]; switchable at run time).
    pub flow_limit: bool,
    /// Buckets of each flow-limit table (the kernel's
    /// `flow_limit_table_len`): a power of two, at most
    /// [`FlowLimit::MAX_BUCKETS`].
    #[doc(alias = "flow_limit_table_len")]
    pub flow_limit_buckets: usize,
    /// Never sleep: poll rings and sources continuously.
    pub busy_poll: bool,
    /// Max packets per poll and per ring drain per round (the NAPI budget).
    #[doc(alias("dev_weight", "netdev_budget"))]
    pub batch: usize,
    /// Empty rounds before an idle worker sleeps (or naps).
    pub idle_spins: u32,
    /// Interrupt deferral after work (`None`, the default: sleep until
    /// woken at once). Ignored when `busy_poll`.
    #[doc(alias("napi_defer_hard_irqs", "gro_flush_timeout", "rx-usecs"))]
    pub defer: Option<Defer>,
    /// Adaptive polling before sleep (`None`, the default: `idle_spins`
    /// empty rounds, then sleep): after its last work a worker keeps
    /// polling for a window that follows how long its sleeps turn out to
    /// be, like the guest haltpoll governor. Ignored when `busy_poll`.
    #[doc(alias("haltpoll", "guest_halt_poll_ns"))]
    pub adaptive: Option<AdaptiveSpin>,
    /// Receive coalescing (`None`, the default: no naps): while packets
    /// come close together a worker that ran out of work naps for a window
    /// sized to gather a batch, instead of waiting to be woken for each
    /// packet. Takes precedence over `defer`; ignored when `busy_poll`.
    pub coalesce: Option<Coalesce>,
    /// Longest sleep (a safety net; a doorbell wakes sooner).
    pub sleep_timeout: Duration,
    /// A flow entry idle this long (milliseconds) may expire.
    pub flow_idle_ms: Tick,
    /// Start with the load balancer on (read by [`RuntimeConfig::shared`];
    /// switchable at run time through `Shared::balance`).
    pub balance: bool,
    /// The load balancer's settings.
    pub balance_config: BalanceConfig,
    /// Time between two load balancer rounds.
    pub balance_interval: Duration,
    /// How often a worker whose handler panicked is restarted in place
    /// before it is given up (see the module docs).
    pub worker_restarts: RestartLimit,
}

/// Interrupt deferral, NAPI's `napi_defer_hard_irqs` with
/// `gro_flush_timeout` (or a NIC's `rx-usecs`): a worker that found work
/// does not go back to waiting for a wake-up at once; it naps on a timer
/// and polls again, `empty_naps` times in a row without work before it
/// sleeps until woken.
///
/// Under a steady moderate load every nap finds a small batch, and nobody
/// wakes the worker: the CPUs that receive its packets (or queue them to
/// its ring) skip the wake-up, an inter-processor interrupt that on a
/// virtual machine costs the sender a VM exit per packet, and the worker
/// pays one timer per batch instead of one wake-up per packet. The price
/// is up to `nap` of added latency for a packet that arrives during a nap;
/// the first packet after a quiet spell still wakes the worker at once.
///
/// ```
/// use std::time::Duration;
/// use steer_core::runtime::{Defer, RuntimeConfig};
/// let cfg = RuntimeConfig { defer: Some(Defer { nap: Duration::from_micros(20), empty_naps: 2 }), ..RuntimeConfig::default() };
/// assert_eq!(cfg.defer.unwrap().empty_naps, 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defer {
    /// How long one nap lasts (a timer; nothing ends it early).
    pub nap: Duration,
    /// Naps in a row that found no work before the worker sleeps until
    /// woken.
    pub empty_naps: u32,
}

impl Default for Defer {
    fn default() -> Self {
        Self {
            nap: Duration::from_micros(50),
            empty_naps: 2,
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cpus: CpuSet::first(1),
            ring_capacity: 1024,
            desired_entries: 4096,
            rx_table_entries: 1024,
            policy: Policy::LlcAffinity,
            rps: RpsMode::Spread,
            fast_path: true,
            flow_limit: false,
            flow_limit_buckets: crate::dispatch::flow_limit::DEFAULT_BUCKETS,
            busy_poll: false,
            batch: 64,
            idle_spins: 64,
            defer: None,
            adaptive: None,
            coalesce: None,
            sleep_timeout: Duration::from_millis(10),
            flow_idle_ms: 10_000,
            balance: false,
            balance_config: BalanceConfig::default(),
            balance_interval: Duration::from_millis(5),
            worker_restarts: RestartLimit::default(),
        }
    }
}

impl RuntimeConfig {
    /// The state a runtime with these settings shares with the application
    /// (the desired-CPU table, the layout, stats, pins and switches), built
    /// before the runtime starts: hand clones to whatever needs the tables
    /// (recorders, flow delivery), then pass it to [`Runtime::start`].
    /// The table gets `desired_entries` slots under `policy`, the switches
    /// `fast_path` and `flow_limit`, the load balancer `balance`.
    pub fn shared(&self, layout: Arc<CpuLayout>) -> Result<Shared, RuntimeError> {
        let shared =
            Shared::new(layout, self.desired_entries, self.policy).map_err(RuntimeError::Table)?;
        let switches = &shared.switches;
        switches.fast_path.store(self.fast_path, Ordering::Relaxed);
        switches
            .flow_limit
            .store(self.flow_limit, Ordering::Relaxed);
        shared.balance.set_on(self.balance);
        Ok(shared)
    }
}

/// Where a flow without a recorded (or pinned) CPU is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[doc(alias = "rps_cpus")]
pub enum RpsMode {
    /// Spread over all worker CPUs by flow hash (RPS with `rps_cpus` = all):
    /// for fewer rx queues than CPUs.
    #[default]
    Spread,
    /// On the CPU of the rx queue's dispatcher (RPS off, RSS only): with an
    /// rx queue per CPU this saves the ring hop; learned and pinned CPUs
    /// still apply.
    Local,
}

/// Why a [`Runtime`] could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// No CPU to run on, or one outside the layout or offline (the set, in
    /// kernel list format).
    BadCpus(String),
    /// A table size was refused.
    Table(TableError),
    /// The ring capacity is not a power of two.
    BadRingCapacity(usize),
    /// The flow-limit table length is not a power of two from 1 to
    /// [`FlowLimit::MAX_BUCKETS`].
    BadFlowLimit(usize),
    /// No rx source was given.
    NoSources,
    /// A thread could not be started (the system's error).
    Thread(String),
    /// The shared state's parts are sized for other CPUs than its layout
    /// (a `Shared` assembled by hand; [`RuntimeConfig::shared`] and
    /// [`Shared::new`] never do this).
    SharedMismatch {
        /// CPUs in the layout.
        layout: usize,
        /// CPUs the desired-CPU table was made for.
        desired: usize,
        /// CPUs with a counter block.
        stats: usize,
    },
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadCpus(set) => write!(
                f,
                "worker CPUs [{set}] must be non-empty, online and inside the CPU layout"
            ),
            Self::Table(e) => write!(f, "{e}"),
            Self::BadRingCapacity(n) => write!(f, "ring capacity {n} must be a power of two"),
            Self::BadFlowLimit(n) => write!(
                f,
                "flow limit table of {n} buckets: give a power of two from 1 to {} \
                 (the kernel's default is 4096)",
                FlowLimit::MAX_BUCKETS
            ),
            Self::NoSources => f.write_str("a runtime needs at least one rx source"),
            Self::Thread(e) => write!(f, "could not start a runtime thread: {e}"),
            Self::SharedMismatch {
                layout,
                desired,
                stats,
            } => write!(
                f,
                "shared state sized for {desired} (table) and {stats} (stats) CPUs, \
                 but its layout has {layout}: build it with RuntimeConfig::shared"
            ),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerState {
    /// Still running.
    Running,
    /// Stopped on request.
    Stopped,
    /// Its handler panicked with this message past its restart limit (or
    /// the restart itself failed); its work moved elsewhere.
    Panicked(String),
}

/// One worker's state and its restarts, from [`WorkerStates::reports`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerReport {
    /// The worker's CPU.
    pub cpu: CpuId,
    /// Running, stopped, or given up after a panic.
    pub state: WorkerState,
    /// Times its handler panicked and it was restarted in place.
    pub restarts: u32,
    /// The message of the last panic it was restarted after.
    pub last_panic: Option<String>,
}

/// Each worker's state, readable from any thread while the runtime runs
/// (a health watcher, a stats snapshot): a handle on the list the workers
/// update when they restart or end.
///
/// ```
/// # use steer_core::runtime::{WorkerState, WorkerStates};
/// let states = WorkerStates::new([1, 2]);
/// assert_eq!(states.snapshot(), vec![(1, WorkerState::Running), (2, WorkerState::Running)]);
/// assert_eq!(states.reports()[0].restarts, 0);
/// ```
#[derive(Debug, Clone)]
pub struct WorkerStates(Arc<Mutex<Vec<WorkerReport>>>);

impl WorkerStates {
    /// Every worker of `cpus` running.
    pub fn new(cpus: impl IntoIterator<Item = CpuId>) -> Self {
        Self(Arc::new(Mutex::new(
            cpus.into_iter()
                .map(|cpu| WorkerReport {
                    cpu,
                    state: WorkerState::Running,
                    restarts: 0,
                    last_panic: None,
                })
                .collect(),
        )))
    }

    /// Each worker's state now.
    pub fn snapshot(&self) -> Vec<(CpuId, WorkerState)> {
        self.lock()
            .iter()
            .map(|r| (r.cpu, r.state.clone()))
            .collect()
    }

    /// Each worker's state and restarts now.
    pub fn reports(&self) -> Vec<WorkerReport> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WorkerReport>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many workers still run.
    pub fn running(&self) -> usize {
        self.lock()
            .iter()
            .filter(|r| r.state == WorkerState::Running)
            .count()
    }

    /// Sets the state of the worker on `cpu`.
    pub(crate) fn set(&self, cpu: CpuId, state: WorkerState) {
        if let Some(r) = self.lock().iter_mut().find(|r| r.cpu == cpu) {
            r.state = state;
        }
    }

    /// Counts a restart of the worker on `cpu` after a panic with `msg`.
    pub(crate) fn restarted(&self, cpu: CpuId, msg: &str) {
        if let Some(r) = self.lock().iter_mut().find(|r| r.cpu == cpu) {
            r.restarts += 1;
            r.last_panic = Some(msg.to_owned());
        }
    }
}

/// What the runtime and its workers share. Workers start before it exists
/// (it needs their doorbells) and take it from a [`CommonSlot`] once
/// `Runtime::start` has published it.
struct Common<D, St: Setup<D>> {
    setup: Arc<St>,
    shared: Shared,
    cfg: RuntimeConfig,
    stop: AtomicBool,
    /// Workers that stopped polling their rx queues (see `Worker::finish`).
    quiesced: AtomicUsize,
    states: WorkerStates,
    orphans: Mutex<Vec<Part<D, St>>>,
    orphan_count: AtomicUsize,
    bells: Vec<Option<Arc<Doorbell>>>,
}

/// Where `Runtime::start` publishes [`Common`] for the workers it started.
type CommonSlot<D, St> = Arc<Mutex<Option<Arc<Common<D, St>>>>>;

/// Running workers. See the module docs.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::dispatch::FramePool;
/// use steer_core::flow::{Classifier, FlowInfo, Malformed};
/// use steer_core::hook::NoopHook;
/// use steer_core::runtime::{RxSource, Runtime, RuntimeConfig, Setup};
///
/// // Descriptors are u32 flow ids; the "frame" is the id's bytes.
/// struct Ids(Vec<[u8; 4]>);
/// impl FramePool<u32> for Ids {
///     fn frame(&self, d: &u32) -> &[u8] { &self.0[*d as usize] }
///     fn release(&mut self, _: u32) {}
/// }
/// struct ById;
/// impl Classifier for ById {
///     fn classify(&mut self, f: &[u8], _: Option<u32>) -> Result<Option<FlowInfo>, Malformed> {
///         Ok(Some(FlowInfo { hash: u32::from_le_bytes(f.try_into().map_err(|_| Malformed)?) | 1, dst_port: 0 }))
///     }
/// }
/// struct Once(Vec<u32>);
/// impl RxSource<u32> for Once {
///     fn poll(&mut self, out: &mut [u32]) -> usize {
///         let n = self.0.len().min(out.len());
///         out[..n].copy_from_slice(&self.0[..n]);
///         self.0.drain(..n);
///         n
///     }
///     fn give_back(&mut self, _: &[u32]) {}
/// }
/// struct App(Arc<Mutex<Vec<u32>>>);
/// impl Setup<u32> for App {
///     type Classifier = ById;
///     type Hook = NoopHook;
///     type Pool = Ids;
///     type Handler = Box<dyn FnMut(u32, &mut Ids) + Send>;
///     fn classifier(&self, _: u32) -> ById { ById }
///     fn hook(&self, _: u32) -> NoopHook { NoopHook }
///     fn pool(&self, _: usize) -> Ids { Ids((0..100u32).map(u32::to_le_bytes).collect()) }
///     fn handler(&self, _: usize) -> Self::Handler {
///         let seen = self.0.clone();
///         Box::new(move |d, _: &mut Ids| seen.lock().unwrap().push(d))
///     }
/// }
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let cfg = RuntimeConfig { cpus: CpuSet::first(1), ..Default::default() };
/// // The shared state exists before the workers: the tables can be handed
/// // out (recorders, flow delivery) before the runtime starts.
/// let shared = cfg.shared(Arc::new(CpuLayout::uniform(1, 1).unwrap())).unwrap();
/// let desired = shared.desired.clone();
/// let rt = Runtime::start(cfg, shared, Arc::new(App(seen.clone())),
///     vec![Box::new(Once((0..100).collect()))]).unwrap();
/// assert!(Arc::ptr_eq(&rt.shared().desired, &desired));
/// while rt.stats().total.processed < 100 { std::thread::yield_now(); }
/// rt.stop();
/// assert_eq!(seen.lock().unwrap().len(), 100);
/// ```
pub struct Runtime<D: Send + 'static, St: Setup<D>> {
    common: Arc<Common<D, St>>,
    threads: Vec<(CpuId, JoinHandle<()>)>,
    balancer: Option<BalancerThread>,
}

impl<D: Send + 'static, St: Setup<D>> std::fmt::Debug for Runtime<D, St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cpus", &self.common.cfg.cpus)
            .finish_non_exhaustive()
    }
}

impl<D, St> Runtime<D, St>
where
    D: Copy + Send + Default + 'static,
    St: Setup<D>,
{
    /// Builds the rings and starts one pinned worker per CPU of `cfg.cpus`
    /// on `shared` (from [`RuntimeConfig::shared`], used as it is: its
    /// table, pins and switches may already hold what the application put
    /// there); rx queue `i` is dispatched by the `i % n`-th worker.
    pub fn start(
        cfg: RuntimeConfig,
        shared: Shared,
        setup: Arc<St>,
        sources: Vec<Box<dyn RxSource<D>>>,
    ) -> Result<Self, RuntimeError> {
        let layout = &shared.layout;
        let cpus: Vec<CpuId> = cfg.cpus.iter().collect();
        if cpus.is_empty() || cpus.iter().any(|&c| !layout.is_online(c)) {
            return Err(RuntimeError::BadCpus(cfg.cpus.to_string()));
        }
        if sources.is_empty() {
            return Err(RuntimeError::NoSources);
        }
        if !cfg.ring_capacity.is_power_of_two() {
            return Err(RuntimeError::BadRingCapacity(cfg.ring_capacity));
        }
        if FlowLimit::new(cfg.flow_limit_buckets).is_none() {
            return Err(RuntimeError::BadFlowLimit(cfg.flow_limit_buckets));
        }
        let nr = layout.nr_cpus();
        let (desired, stats) = (shared.desired.codec().nr_cpus(), shared.stats.nr_cpus());
        if desired != nr || stats != nr {
            return Err(RuntimeError::SharedMismatch {
                layout: nr,
                desired,
                stats,
            });
        }

        // The ring matrix: producers[rxq][cpu], inbound[cpu] = one per rxq.
        let mut inbound: Vec<Vec<Inbound<D>>> = (0..nr).map(|_| Vec::new()).collect();
        // parts[rxq] = (dispatching CPU, producers to every worker, source)
        type Placed<D> = (CpuId, Vec<Option<Producer<D>>>, Box<dyn RxSource<D>>);
        let mut parts: Vec<Option<Placed<D>>> = Vec::new();
        for (rxq, source) in sources.into_iter().enumerate() {
            let mut producers: Vec<Option<Producer<D>>> = (0..nr).map(|_| None).collect();
            for &cpu in &cpus {
                let (p, c) = ring::channel(cfg.ring_capacity)
                    .map_err(|_| RuntimeError::BadRingCapacity(cfg.ring_capacity))?;
                producers[cpu] = Some(p);
                inbound[cpu].push(Inbound { rxq, consumer: c });
            }
            parts.push(Some((cpus[rxq % cpus.len()], producers, source)));
        }
        // Probe the rx-table size once so workers cannot fail on it.
        RxFlowTable::new(0, cfg.rx_table_entries).map_err(RuntimeError::Table)?;
        // Stopped again (dropped) if anything below fails.
        let balancer = BalancerThread::start(
            shared.clone(),
            cfg.cpus,
            cfg.balance_config,
            cfg.balance_interval,
        )
        .map_err(|e| RuntimeError::Thread(e.to_string()))?;

        let (bell_tx, bell_rx) = std::sync::mpsc::channel::<(CpuId, Arc<Doorbell>)>();
        let mut bells: Vec<Option<Arc<Doorbell>>> = vec![None; nr];
        let mut threads = Vec::new();
        let ready = Arc::new(std::sync::Barrier::new(cpus.len() + 1));
        // Workers start before `Common` exists (it needs their doorbells);
        // they pick it up here after the second barrier.
        let common_slot: CommonSlot<D, St> = Arc::new(Mutex::new(None));
        for &cpu in &cpus {
            let (part_tx, part_rx) = std::sync::mpsc::channel::<PartSeed<D>>();
            for (rxq, seed) in parts.iter_mut().enumerate() {
                if seed.as_ref().is_some_and(|p| p.0 == cpu) {
                    if let Some((_, producers, source)) = seed.take() {
                        let _ = part_tx.send((rxq, producers, source));
                    }
                }
            }
            drop(part_tx);
            let startup = Startup {
                cpu,
                setup: setup.clone(),
                inbound: std::mem::take(&mut inbound[cpu]),
                parts: part_rx,
                bell_tx: bell_tx.clone(),
                ready: ready.clone(),
                common: common_slot.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("steer-worker-{cpu}"))
                .spawn(move || startup.run())
                .map_err(|_| RuntimeError::BadCpus(cfg.cpus.to_string()))?;
            threads.push((cpu, handle));
        }
        drop(bell_tx);
        ready.wait();
        for (cpu, bell) in bell_rx.iter() {
            bells[cpu] = Some(bell);
        }
        let common = Arc::new(Common {
            setup,
            shared,
            states: WorkerStates::new(cpus.iter().copied()),
            cfg,
            stop: AtomicBool::new(false),
            quiesced: AtomicUsize::new(0),
            orphans: Mutex::new(Vec::new()),
            orphan_count: AtomicUsize::new(0),
            bells,
        });
        *common_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(common.clone());
        ready.wait();
        Ok(Self {
            common,
            threads,
            balancer: Some(balancer),
        })
    }

    /// [`Runtime::start`] on fresh shared state for `layout`
    /// ([`RuntimeConfig::shared`]), for callers that need the tables only
    /// after the start ([`Runtime::shared`]).
    pub fn start_with_layout(
        cfg: RuntimeConfig,
        layout: Arc<CpuLayout>,
        setup: Arc<St>,
        sources: Vec<Box<dyn RxSource<D>>>,
    ) -> Result<Self, RuntimeError> {
        let shared = cfg.shared(layout)?;
        Self::start(cfg, shared, setup, sources)
    }

    /// What dispatchers and recorders share: the desired-CPU table (record
    /// consumption into it), the layout, stats, pins and switches.
    pub fn shared(&self) -> &Shared {
        &self.common.shared
    }

    /// The setup the runtime was started with.
    pub fn setup(&self) -> &Arc<St> {
        &self.common.setup
    }

    /// Per-CPU counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.common.shared.stats.snapshot()
    }

    /// Each worker's state.
    pub fn worker_states(&self) -> Vec<(CpuId, WorkerState)> {
        self.common.states.snapshot()
    }

    /// The doorbell of the worker on `cpu` (`None`: no worker there), for
    /// whoever queues it side work ([`crate::dispatch::Handler::poll_side`]):
    /// queue first, then ring.
    pub fn doorbell(&self, cpu: CpuId) -> Option<Arc<Doorbell>> {
        self.common.bells.get(cpu).and_then(Clone::clone)
    }

    /// A handle on the workers' states that outlives borrows of the
    /// runtime (for a watcher thread).
    pub fn worker_states_handle(&self) -> WorkerStates {
        self.common.states.clone()
    }

    /// Stops every worker: each handles what is queued to it and exits.
    /// Returns the final worker states.
    pub fn stop(mut self) -> Vec<(CpuId, WorkerState)> {
        self.shutdown();
        self.worker_states()
    }
}

impl<D: Send + 'static, St: Setup<D>> Drop for Runtime<D, St> {
    fn drop(&mut self) {
        // A no-op after `stop` (no threads left to join).
        self.shutdown();
    }
}

impl<D: Send + 'static, St: Setup<D>> Runtime<D, St> {
    fn shutdown(&mut self) {
        if let Some(mut b) = self.balancer.take() {
            b.stop();
        }
        self.common.stop.store(true, Ordering::SeqCst);
        for bell in self.common.bells.iter().flatten() {
            bell.ring();
        }
        for (_, t) in self.threads.drain(..) {
            let _ = t.join();
        }
        // Rx queues orphaned by a panicked worker with nobody left to adopt
        // them: dropping them drops their sources.
        let orphans = std::mem::take(
            &mut *self
                .common
                .orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        drop(orphans);
    }
}
