//! Pinned workers, one per configured CPU, and the ring matrix between them.
//!
//! A [`Runtime`] owns one worker thread per CPU of its set, pinned through
//! the caller's [`Setup::prepare_thread`]. Every rx queue ([`RxSource`]) has a
//! [`Dispatcher`] run by one worker (queue `i` on the `i`-th CPU, round
//! robin), and every dispatcher has one SPSC ring to every worker. A worker
//! loop, like NAPI plus `process_backlog`:
//! 1. polls its rx queues and dispatches each batch (inline fast path, or to
//!    the target's ring, ringing its doorbell);
//! 2. drains each inbound ring with [`Consumer::consume`], at most `batch`
//!    packets per ring per round (a full budget with packets left counts a
//!    `time_squeeze`), so the head advances only after the handler returned;
//! 3. when idle: maintenance (flow-table expiry, never per packet), then,
//!    unless busy-polling, spins a little and sleeps on its [`Doorbell`].
//!
//! A worker whose handler panics is detected: its CPU is marked offline (the
//! LLC rule's "old CPU invalid" case re-steers its flows on the next record),
//! the frames still queued to it are returned to the pool and counted as
//! dropped, its rx queues are adopted by a surviving worker, and its rings
//! are dropped so every dispatcher routes around it. The rest keep running.
//!
//! [`Runtime::stop`] (or drop) asks every worker to finish: each handles
//! what is queued to it, returns its un-dispatched frames, and exits.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cpu::{CpuId, CpuLayout, CpuSet};
use crate::dispatch::{DispatchSwitches, Dispatcher, FramePool, Handler, Pins, Shared};
use crate::flow::Classifier;
use crate::hook::SteerHook;
use crate::policy::Policy;
use crate::ring::{self, Consumer, Producer};
use crate::stats::{LocalStats, Stats, StatsSnapshot};
use crate::table::{DesiredCpuTable, RxFlowTable, TableError, Tick};
use crate::wake::{Doorbell, Sleeper, ThreadSleeper};

/// Frames arriving on one rx queue (an AF_XDP socket, a generator).
pub trait RxSource<D>: Send {
    /// Writes up to `out.len()` received descriptors to `out`; returns how many.
    fn poll(&mut self, out: &mut [D]) -> usize;
    /// Gives back descriptors this source handed out that will never be
    /// dispatched (shutdown, or a worker that died mid-batch).
    fn give_back(&mut self, descs: &[D]);
    /// Whether frames are waiting (checked before an idle worker sleeps;
    /// `false` when unknown, then the worker wakes on its sleep timeout or
    /// through a [`Sleeper`] that watches the source).
    fn has_pending(&self) -> bool {
        false
    }
}

/// What the application plugs into a [`Runtime`]: per-CPU parts built on
/// the worker's own thread (after pinning), so they can be thread-local.
pub trait Setup<D>: Send + Sync + 'static {
    /// Finds flows in frames.
    type Classifier: Classifier + Send;
    /// The steering hook of each rx-queue table.
    type Hook: SteerHook + Send;
    /// A worker's handle on the frame pool.
    type Pool: FramePool<D>;
    /// The packet handler.
    type Handler: Handler<D, Self::Pool>;

    /// Prepares the calling thread, the worker of `cpu`, before anything
    /// else runs on it: pinning, scheduling attributes (default: nothing;
    /// the facade pins through the live topology and sets the workers'
    /// scheduling slice).
    fn prepare_thread(&self, _cpu: CpuId) {}
    /// A classifier for the dispatcher of rx queue `rxq`.
    fn classifier(&self, rxq: u32) -> Self::Classifier;
    /// The steering hook of rx queue `rxq`'s table.
    fn hook(&self, rxq: u32) -> Self::Hook;
    /// The pool handle of the worker on `cpu`.
    fn pool(&self, cpu: CpuId) -> Self::Pool;
    /// The handler of the worker on `cpu`.
    fn handler(&self, cpu: CpuId) -> Self::Handler;
    /// How the worker on `cpu` sleeps (default: thread parking).
    fn sleeper(&self, _cpu: CpuId) -> Box<dyn Sleeper> {
        Box::new(ThreadSleeper::current())
    }
}

/// Settings of a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// CPUs to run workers on.
    pub cpus: CpuSet,
    /// Slots of each (dispatcher, worker) ring; a power of two.
    pub ring_capacity: usize,
    /// Slots of the desired-CPU table; a power of two.
    pub desired_entries: usize,
    /// Buckets of each rx-queue table; a power of two.
    pub rx_table_entries: usize,
    /// Starting update policy (switchable at run time).
    pub policy: Policy,
    /// Where flows nobody has recorded a CPU for go.
    pub rps: RpsMode,
    /// Start with the same-CPU fast path on.
    pub fast_path: bool,
    /// Start with the per-CPU flow limit on.
    pub flow_limit: bool,
    /// Never sleep: poll rings and sources continuously.
    pub busy_poll: bool,
    /// Max packets per poll and per ring drain per round (the NAPI budget).
    pub batch: usize,
    /// Empty rounds before an idle worker sleeps.
    pub idle_spins: u32,
    /// Longest sleep (a safety net; a doorbell wakes sooner).
    pub sleep_timeout: Duration,
    /// A flow entry idle this long (milliseconds) may expire.
    pub flow_idle_ms: Tick,
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
            busy_poll: false,
            batch: 64,
            idle_spins: 64,
            sleep_timeout: Duration::from_millis(10),
            flow_idle_ms: 10_000,
        }
    }
}

/// Where a flow without a recorded (or pinned) CPU is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// No rx source was given.
    NoSources,
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
            Self::NoSources => f.write_str("a runtime needs at least one rx source"),
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
    /// Its handler panicked with this message; its work moved elsewhere.
    Panicked(String),
}

struct RxPart<D, C, H: SteerHook, S> {
    dispatcher: Dispatcher<D, C, H>,
    source: S,
}

type Part<D, St> =
    RxPart<D, <St as Setup<D>>::Classifier, <St as Setup<D>>::Hook, Box<dyn RxSource<D>>>;

struct Common<D, St: Setup<D>> {
    setup: Arc<St>,
    shared: Shared,
    cfg: RuntimeConfig,
    stop: AtomicBool,
    /// Workers that stopped polling their rx queues (see `Worker::finish`).
    quiesced: AtomicUsize,
    states: Mutex<Vec<(CpuId, WorkerState)>>,
    orphans: Mutex<Vec<Part<D, St>>>,
    orphan_count: AtomicUsize,
    bells: Vec<Option<Arc<Doorbell>>>,
}

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
/// let layout = Arc::new(CpuLayout::uniform(1, 1).unwrap());
/// let rt = Runtime::start(cfg, layout, Arc::new(App(seen.clone())),
///     vec![Box::new(Once((0..100).collect()))]).unwrap();
/// while rt.stats().total.processed < 100 { std::thread::yield_now(); }
/// rt.stop();
/// assert_eq!(seen.lock().unwrap().len(), 100);
/// ```
pub struct Runtime<D: Send + 'static, St: Setup<D>> {
    common: Arc<Common<D, St>>,
    threads: Vec<(CpuId, JoinHandle<()>)>,
}

impl<D: Send + 'static, St: Setup<D>> std::fmt::Debug for Runtime<D, St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cpus", &self.common.cfg.cpus)
            .finish_non_exhaustive()
    }
}

struct Inbound<D> {
    /// The rx queue whose dispatcher feeds this ring.
    rxq: usize,
    consumer: Consumer<D>,
}

impl<D, St> Runtime<D, St>
where
    D: Copy + Send + Default + 'static,
    St: Setup<D>,
{
    /// Builds the tables and rings and starts one pinned worker per CPU of
    /// `cfg.cpus`; rx queue `i` is dispatched by the `i % n`-th worker.
    pub fn start(
        cfg: RuntimeConfig,
        layout: Arc<CpuLayout>,
        setup: Arc<St>,
        sources: Vec<Box<dyn RxSource<D>>>,
    ) -> Result<Self, RuntimeError> {
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
        let nr = layout.nr_cpus();
        let desired = DesiredCpuTable::with_policy(cfg.desired_entries, nr, cfg.policy)
            .map_err(RuntimeError::Table)?;
        let switches = DispatchSwitches::default();
        switches.fast_path.store(cfg.fast_path, Ordering::Relaxed);
        switches.flow_limit.store(cfg.flow_limit, Ordering::Relaxed);
        let shared = Shared {
            desired: Arc::new(desired),
            layout,
            stats: Arc::new(Stats::new(nr)),
            pins: Pins::new(),
            switches: Arc::new(switches),
        };

        // The ring matrix: producers[rxq][cpu], inbound[cpu] = one per rxq.
        let mut inbound: Vec<Vec<Inbound<D>>> = (0..nr).map(|_| Vec::new()).collect();
        // parts[rxq] = (dispatching CPU, producers to every worker, source)
        type PartSeed<D> = (CpuId, Vec<Option<Producer<D>>>, Box<dyn RxSource<D>>);
        let mut parts: Vec<Option<PartSeed<D>>> = Vec::new();
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

        let (bell_tx, bell_rx) = std::sync::mpsc::channel::<(CpuId, Arc<Doorbell>)>();
        let mut bells: Vec<Option<Arc<Doorbell>>> = vec![None; nr];
        let mut threads = Vec::new();
        let ready = Arc::new(std::sync::Barrier::new(cpus.len() + 1));
        // Workers start before `Common` exists (it needs their doorbells);
        // they pick it up here after the second barrier.
        type Slot<T> = Arc<Mutex<Option<Arc<T>>>>;
        let common_slot: Slot<Common<D, St>> = Arc::new(Mutex::new(None));
        for &cpu in &cpus {
            let my_inbound = std::mem::take(&mut inbound[cpu]);
            let bell_tx = bell_tx.clone();
            let setup = setup.clone();
            let ready = ready.clone();
            let slot = common_slot.clone();
            let (part_tx, part_rx) = std::sync::mpsc::channel::<(
                usize,
                Vec<Option<Producer<D>>>,
                Box<dyn RxSource<D>>,
            )>();
            for (rxq, seed) in parts.iter_mut().enumerate() {
                if seed.as_ref().is_some_and(|p| p.0 == cpu) {
                    if let Some((_, producers, source)) = seed.take() {
                        let _ = part_tx.send((rxq, producers, source));
                    }
                }
            }
            drop(part_tx);
            let handle = std::thread::Builder::new()
                .name(format!("steer-worker-{cpu}"))
                .spawn(move || {
                    setup.prepare_thread(cpu);
                    let bell = Doorbell::new(BoxedSleeper(setup.sleeper(cpu)));
                    let _ = bell_tx.send((cpu, bell.clone()));
                    drop(bell_tx);
                    ready.wait(); // all bells known
                    ready.wait(); // common published
                    let common = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    let Some(common) = common else { return };
                    let rx = part_rx
                        .into_iter()
                        .map(|(rxq, producers, source)| {
                            let rxq = rxq as u32;
                            let table = RxFlowTable::with_hook(
                                rxq,
                                common.cfg.rx_table_entries,
                                setup.hook(rxq),
                            )
                            .unwrap_or_else(|_| unreachable_table());
                            let mut d = Dispatcher::new(
                                cpu,
                                rxq,
                                setup.classifier(rxq),
                                table,
                                producers,
                                match common.cfg.rps {
                                    RpsMode::Spread => common.cfg.cpus,
                                    RpsMode::Local => CpuSet::default(),
                                },
                                common.shared.clone(),
                            );
                            for (c, b) in common.bells.iter().enumerate() {
                                if let Some(b) = b {
                                    d.set_doorbell(c, b.clone());
                                }
                            }
                            RxPart {
                                dispatcher: d,
                                source,
                            }
                        })
                        .collect();
                    Worker::new(cpu, common, my_inbound, rx, bell).run();
                })
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
            states: Mutex::new(cpus.iter().map(|&c| (c, WorkerState::Running)).collect()),
            cfg,
            stop: AtomicBool::new(false),
            quiesced: AtomicUsize::new(0),
            orphans: Mutex::new(Vec::new()),
            orphan_count: AtomicUsize::new(0),
            bells,
        });
        *common_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(common.clone());
        ready.wait();
        Ok(Self { common, threads })
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
        self.common
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

fn unreachable_table() -> ! {
    // The size was validated in `Runtime::start`.
    panic!("rx table size validated at start")
}

/// Worker rounds between reads of the clock (a vDSO call is not free).
const TICK_EVERY: u32 = 64;

/// How long a stopping worker waits for the others to stop polling.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(2);

struct BoxedSleeper(Box<dyn Sleeper>);

impl Sleeper for BoxedSleeper {
    fn sleep(&self, timeout: Duration) {
        self.0.sleep(timeout)
    }
    fn wake(&self) {
        self.0.wake()
    }
}

struct Worker<D, St: Setup<D>> {
    cpu: CpuId,
    common: Arc<Common<D, St>>,
    inbound: Vec<Inbound<D>>,
    rx: Vec<Part<D, St>>,
    pool: St::Pool,
    handler: St::Handler,
    bell: Arc<Doorbell>,
    buf: Vec<D>,
    /// Descriptors in `buf` from the last poll, and the rx part being
    /// dispatched (for recovery when the handler panics mid-batch).
    polled: usize,
    dispatching: Option<usize>,
    local: LocalStats,
    start: Instant,
}

impl<D, St> Worker<D, St>
where
    D: Copy + Send + Default + 'static,
    St: Setup<D>,
{
    fn new(
        cpu: CpuId,
        common: Arc<Common<D, St>>,
        inbound: Vec<Inbound<D>>,
        rx: Vec<Part<D, St>>,
        bell: Arc<Doorbell>,
    ) -> Self {
        let pool = common.setup.pool(cpu);
        let handler = common.setup.handler(cpu);
        let batch = common.cfg.batch.max(1);
        Self {
            cpu,
            common,
            inbound,
            rx,
            pool,
            handler,
            bell,
            buf: vec![D::default(); batch],
            polled: 0,
            dispatching: None,
            local: LocalStats::default(),
            start: Instant::now(),
        }
    }

    fn run(mut self) {
        let result = catch_unwind(AssertUnwindSafe(|| self.run_loop()));
        match result {
            Ok(()) => {
                self.finish();
                self.set_state(WorkerState::Stopped);
            }
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                self.die(msg);
            }
        }
    }

    fn set_state(&self, state: WorkerState) {
        let mut states = self
            .common
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = states.iter_mut().find(|(c, _)| *c == self.cpu) {
            s.1 = state;
        }
    }

    fn run_loop(&mut self) {
        let mut idle_rounds = 0u32;
        let mut rounds = 0u32;
        let mut last_tick: Tick = 0;
        while !self.common.stop.load(Ordering::Relaxed) {
            if self.common.orphan_count.load(Ordering::Relaxed) > 0 {
                self.adopt();
            }
            let work = self.poll_sources() + self.drain_rings();
            if work > 0 {
                self.handler.flush(&mut self.pool);
            }
            idle_rounds = if work > 0 {
                0
            } else {
                idle_rounds.saturating_add(1)
            };
            // The clock is read every TICK_EVERY rounds, busy or not (flows'
            // last-used ticks must advance under load too), and on the first
            // idle round; the tick is written once per millisecond at most.
            rounds = rounds.wrapping_add(1);
            let tick_round = rounds % TICK_EVERY == 0 || idle_rounds == 1;
            if tick_round {
                let now = self.start.elapsed().as_millis() as Tick;
                if now != last_tick {
                    last_tick = now;
                    for part in &mut self.rx {
                        part.dispatcher.set_tick(now);
                        // Maintenance off the hot path: only when idle.
                        if work == 0 {
                            part.dispatcher.sweep(self.common.cfg.flow_idle_ms, 64);
                        }
                    }
                }
            }
            // Counters change only with work or on a tick (sweeps): idle
            // rounds leave the shared block alone.
            if work > 0 || tick_round {
                if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
                    block.flush(&mut self.local);
                }
            }
            if work > 0 {
                continue;
            }
            if !self.common.cfg.busy_poll && idle_rounds > self.common.cfg.idle_spins {
                let inbound = &self.inbound;
                let rx = &self.rx;
                let common = &self.common;
                self.bell.sleep_unless(
                    || {
                        common.stop.load(Ordering::SeqCst)
                            || common.orphan_count.load(Ordering::SeqCst) > 0
                            || inbound.iter().any(|i| !i.consumer.is_empty())
                            || rx.iter().any(|p| p.source.has_pending())
                    },
                    self.common.cfg.sleep_timeout,
                );
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn poll_sources(&mut self) -> usize {
        let mut work = 0;
        for i in 0..self.rx.len() {
            let n = self.rx[i].source.poll(&mut self.buf);
            if n == 0 {
                continue;
            }
            self.polled = n;
            self.dispatching = Some(i);
            let part = &mut self.rx[i];
            part.dispatcher
                .dispatch(&self.buf[..n], &mut self.pool, &mut self.handler);
            self.dispatching = None;
            work += n;
        }
        work
    }

    fn drain_rings(&mut self) -> usize {
        let batch = self.common.cfg.batch.max(1);
        let mut work = 0;
        for inbound in &mut self.inbound {
            let pool = &mut self.pool;
            let handler = &mut self.handler;
            let got = inbound.consumer.consume(batch, |d| handler.handle(d, pool));
            if got == 0 {
                continue;
            }
            work += got;
            self.local.processed += got as u64;
            let local_rxq = self
                .rx
                .iter()
                .any(|p| p.dispatcher.rx_table().rxq() as usize == inbound.rxq);
            if !local_rxq {
                self.local.steered_in += got as u64;
            }
            if got == batch && !inbound.consumer.is_empty() {
                self.local.time_squeeze += 1;
            }
        }
        work
    }

    fn adopt(&mut self) {
        let mut orphans = self
            .common
            .orphans
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for mut part in orphans.drain(..) {
            part.dispatcher.set_own_cpu(self.cpu);
            self.rx.push(part);
        }
        self.common.orphan_count.store(0, Ordering::Relaxed);
    }

    /// Stop requested: handle what is queued. Two phases, so no frame is
    /// left in a ring: this worker has stopped polling its rx queues; it keeps
    /// draining until every running worker has stopped polling too (nothing
    /// new can enter a ring after that), then drains once more and flushes.
    fn finish(&mut self) {
        self.common.quiesced.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + QUIESCE_TIMEOUT;
        loop {
            self.drain_rings();
            let running = self
                .common
                .states
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|(_, s)| *s == WorkerState::Running)
                .count();
            if self.common.quiesced.load(Ordering::SeqCst) >= running || Instant::now() > deadline {
                break;
            }
            std::thread::yield_now();
        }
        while self.drain_rings() > 0 {}
        self.handler.flush(&mut self.pool);
        if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
            block.flush(&mut self.local);
        }
    }

    /// The handler panicked: route everything around this worker.
    fn die(mut self, msg: String) {
        // Announce first, so whoever sees the frames come back sees why.
        self.set_state(WorkerState::Panicked(msg));
        self.common.shared.layout.set_online(self.cpu, false);
        // The batch being dispatched when the handler panicked: what it had
        // not reached yet goes back to its source.
        if let Some(part) = self.dispatching.and_then(|i| self.rx.get_mut(i)) {
            let from = part.dispatcher.taken_in_batch().min(self.polled);
            part.source.give_back(&self.buf[from..self.polled]);
        }
        // What the handler staged before it panicked still goes out, if the
        // handler can still do that much.
        let _ = catch_unwind(AssertUnwindSafe(|| self.handler.flush(&mut self.pool)));
        // Frames still queued to this worker are dropped, not leaked.
        for inbound in &mut self.inbound {
            while let Some(d) = inbound.consumer.pop() {
                self.local.dropped += 1;
                self.pool.release(d);
            }
        }
        if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
            block.flush(&mut self.local);
        }
        // Abandon our rings (dispatchers route around us), then tell the
        // dispatchers, which take back anything pushed after the drain above.
        drop(std::mem::take(&mut self.inbound));
        self.common
            .shared
            .switches
            .worker_exits
            .fetch_add(1, Ordering::Release);
        // Our rx queues go to a surviving worker.
        let rx = std::mem::take(&mut self.rx);
        let n = rx.len();
        if n > 0 {
            self.common
                .orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(rx);
            self.common.orphan_count.fetch_add(n, Ordering::SeqCst);
            for bell in self.common.bells.iter().flatten() {
                bell.ring();
            }
        }
    }
}
