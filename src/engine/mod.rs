//! The engine: steer's runtime on an AF_XDP port. [`EngineBuilder`] takes
//! the interface, queues, CPUs, update policy, fast path, sleep or busy-poll,
//! ring and table sizes, the owned traffic and the handler; [`Engine`] owns
//! the XDP program, the UMEM and its sockets, and the pinned workers, and
//! [`Engine::stop`] drains, returns every frame, checks the frame census and
//! detaches the program.
//!
//! Wiring (one UMEM, one socket per rx queue, one worker per CPU):
//! - rx queue `i`'s socket is polled and dispatched by the `i % n`-th worker
//!   (an `XskSource`, in `frames`);
//! - the worker on the `j`-th CPU transmits on socket `j % queues` (sockets
//!   are shared through a mutex taken once per batch; with as many queues as
//!   CPUs each socket has one rx and one tx user on the same thread);
//! - handlers release frames to a spare pool that sockets top up from.
//!
//! ```no_run
//! use steer::engine::{Engine, Verdict};
//! use steer::xdp::Proto;
//! # fn main() -> Result<(), steer::engine::EngineError> {
//! let engine = Engine::builder("veth0")
//!     .own(Proto::Udp, 9000)
//!     .handler(|_cpu| Box::new(|packet: &mut [u8], _ctx: &steer::engine::PacketContext| {
//!         Verdict::Transmit(packet.len()) // an echo that does not even swap addresses
//!     }))
//!     .start()?;
//! println!("{}", engine.stats().table(None));
//! let report = engine.stop()?;
//! assert!(report.census_ok());
//! # Ok(()) }
//! ```

mod app;
mod counters;
mod frames;
mod sched;
mod stats;
mod tx;

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::flow::{FlowClassifier, KeyedHasher};
use steer_core::hook::NoopHook;
use steer_core::policy::Policy;
pub use steer_core::runtime::RpsMode;
use steer_core::runtime::{RuntimeConfig, RuntimeError, RxSource, Setup, WorkerState};
use steer_core::wake::Sleeper;
use topology::Topology;
use tracing::{info, warn};
use xdp_io::{
    BindMode, FrameCensus, PortConfig, ProgramStats, Proto, QueueSocket, RawFrame, SocketStats,
    XdpError, XdpMode, XdpPort,
};

pub use app::{HandlerFactory, PacketContext, PacketHandler, Verdict};
pub use counters::WorkerCounts;
pub use stats::{CpuRow, EngineReport, EngineStats};

use app::WorkerHandler;
use counters::EngineCounters;
pub(crate) use frames::{lock, SharedSocket, SparePool};
use frames::{UmemPool, XskSource};
use tx::TxPath;

use crate::flows::{FlowDemux, FlowListener, FlowOptions, Hub, HubStats};
use crate::sleep::MioSleeper;

/// `start` checked that exactly one of handler and flow delivery is set.
fn unreachable_config() -> ! {
    unreachable!("EngineBuilder::start validated handler xor flows")
}

type Runtime = steer_core::runtime::Runtime<RawFrame, EngineSetup>;

/// The scheduling slice workers ask for unless told otherwise
/// ([`EngineBuilder::worker_slice`]): the shortest the kernel grants.
pub const DEFAULT_WORKER_SLICE: Duration = Duration::from_micros(100);

/// Why the engine could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The AF_XDP side (privileges, interface, XDP mode, UMEM, sockets).
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The CPU topology could not be read.
    #[error("reading the CPU topology: {0}")]
    Topology(#[from] topology::Error),
    /// The runtime refused the settings.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// A worker's event loop could not be set up.
    #[error("setting up a worker's event loop: {0}")]
    Io(#[from] std::io::Error),
}

/// Settings of an [`Engine`]; see [`Engine::builder`].
pub struct EngineBuilder {
    port: PortConfig,
    runtime: RuntimeConfig,
    cpus: Option<CpuSet>,
    topology: Option<Topology>,
    pin: bool,
    use_rx_hash: bool,
    handler: Option<HandlerFactory>,
    flows: Option<FlowOptions>,
    rps: Option<RpsMode>,
    worker_slice: Option<Duration>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("port", &self.port)
            .field("runtime", &self.runtime)
            .field("cpus", &self.cpus)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    fn new(interface: &str) -> Self {
        Self {
            port: PortConfig::new(interface),
            runtime: RuntimeConfig {
                // Flows sharing a desired-table entry overwrite each other's
                // CPU under any policy: size it well above the flow count
                // (the kernel's rps_sock_flow_entries is usually 32768).
                desired_entries: 65536,
                ..RuntimeConfig::default()
            },
            cpus: None,
            topology: None,
            pin: true,
            use_rx_hash: false,
            handler: None,
            flows: None,
            rps: None,
            worker_slice: Some(DEFAULT_WORKER_SLICE),
        }
    }

    /// Redirects `proto` traffic to `port` to steer (repeatable); everything
    /// else goes to the kernel.
    pub fn own(mut self, proto: Proto, port: u16) -> Self {
        self.port = self.port.own(proto, port);
        self
    }

    /// The rx queues to open (default: all of the interface's).
    pub fn queues(mut self, queues: impl IntoIterator<Item = u32>) -> Self {
        self.port = self.port.queues(queues);
        self
    }

    /// The CPUs to run workers on (default: every online CPU).
    pub fn cpus(mut self, cpus: CpuSet) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// The topology the LLC rule uses (default: the live machine). A model
    /// (synthetic, XML) also turns pinning off.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.pin = topology.source().is_live();
        self.topology = Some(topology);
        self
    }

    /// Pin each worker to its CPU (default on with the live topology).
    pub fn pin_workers(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// The desired-table update policy at start (switchable at run time).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.runtime.policy = policy;
        self
    }

    /// The same-CPU fast path at start (switchable at run time).
    pub fn fast_path(mut self, on: bool) -> Self {
        self.runtime.fast_path = on;
        self
    }

    /// Where flows without a recorded or pinned CPU run (default: `Local`
    /// when there are at least as many rx queues as worker CPUs, so a flow
    /// stays on its rx queue's CPU; `Spread` by flow hash otherwise).
    pub fn rps(mut self, mode: RpsMode) -> Self {
        self.rps = Some(mode);
        self
    }

    /// The scheduling slice each worker thread asks for (default
    /// [`DEFAULT_WORKER_SLICE`]; `None`: the kernel's default, 1.4 ms on a
    /// 2-CPU machine). On Linux >= 6.12 a short slice lets a worker woken
    /// by packets preempt the task running on its CPU instead of waiting
    /// for that task's slice to end, which is what keeps latency low when
    /// workers share CPUs with other busy threads; it does not give the
    /// worker more CPU time. The kernel clamps it to 100 us .. 100 ms, and
    /// older kernels ignore it. Threads under a real-time policy are left
    /// alone.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let engine = steer::engine::Engine::builder("eth1")
    ///     .worker_slice(Some(Duration::from_micros(200)))
    ///     .start()?;
    /// # Ok::<(), steer::engine::EngineError>(())
    /// ```
    pub fn worker_slice(mut self, slice: Option<Duration>) -> Self {
        self.worker_slice = slice;
        self
    }

    /// Busy-poll (never sleep) instead of sleeping on doorbells and sockets.
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.runtime.busy_poll = on;
        self
    }

    /// Empty rounds a worker spins before it sleeps (more: fewer wake-ups
    /// under bursty load, more CPU burnt while idle).
    pub fn idle_spins(mut self, rounds: u32) -> Self {
        self.runtime.idle_spins = rounds;
        self
    }

    /// Slots of each dispatcher-to-worker ring (a power of two).
    pub fn ring_capacity(mut self, slots: usize) -> Self {
        self.runtime.ring_capacity = slots;
        self
    }

    /// Entries of the desired-CPU table and buckets of each rx-queue table
    /// (powers of two).
    pub fn flow_tables(mut self, desired: usize, per_rx_queue: usize) -> Self {
        self.runtime.desired_entries = desired;
        self.runtime.rx_table_entries = per_rx_queue;
        self
    }

    /// UMEM frames and the size of each AF_XDP ring.
    pub fn frames(mut self, frame_count: u32, xsk_ring_size: u32) -> Self {
        self.port = self.port.frames(frame_count, xsk_ring_size);
        self
    }

    /// Packets per poll and per ring drain (the NAPI budget).
    pub fn batch(mut self, packets: usize) -> Self {
        self.runtime.batch = packets;
        self
    }

    /// XDP attach mode (default: native, falling back to generic).
    pub fn xdp_mode(mut self, mode: XdpMode) -> Self {
        self.port = self.port.xdp_mode(mode);
        self
    }

    /// AF_XDP bind mode (default: zero-copy, falling back to copy).
    pub fn bind_mode(mut self, mode: BindMode) -> Self {
        self.port = self.port.bind_mode(mode);
        self
    }

    /// Use the NIC's receive hash instead of hashing in software.
    pub fn use_rx_hash(mut self, on: bool) -> Self {
        self.use_rx_hash = on;
        self
    }

    /// A flow entry idle this long may expire (its steering state removed).
    pub fn flow_idle(mut self, idle: Duration) -> Self {
        self.runtime.flow_idle_ms = idle.as_millis().try_into().unwrap_or(u32::MAX as _);
        self
    }

    /// The handler each worker runs, built on the worker's thread.
    pub fn handler<F>(mut self, factory: F) -> Self
    where
        F: Fn(CpuId) -> Box<dyn PacketHandler> + Send + Sync + 'static,
    {
        self.handler = Some(Arc::new(factory));
        self
    }

    /// Delivers each UDP flow to the application as a [`Flow`](crate::flows::Flow)
    /// (see [`crate::flows`]) instead of running a packet handler; take the
    /// listener(s) with [`Engine::listener`] / [`Engine::listener_for`].
    pub fn deliver_flows(mut self, options: FlowOptions) -> Self {
        self.flows = Some(options);
        self
    }

    /// Opens the port and starts the workers.
    pub fn start(self) -> Result<Engine, EngineError> {
        if self.handler.is_some() == self.flows.is_some() {
            return Err(EngineError::Config(
                "give exactly one of a packet handler (EngineBuilder::handler) or flow delivery \
                 (EngineBuilder::deliver_flows)"
                    .into(),
            ));
        }
        if self.port.owned.is_empty() {
            return Err(EngineError::Config(
                "no owned traffic: name at least one protocol and port (EngineBuilder::own)".into(),
            ));
        }
        let topology = match self.topology {
            Some(t) => t,
            None => Topology::live()?,
        };
        let layout: Arc<CpuLayout> = topology.layout();
        let cpus = self.cpus.unwrap_or_else(|| topology.online_cpus());
        let mut cfg = self.runtime;
        cfg.cpus = cpus;
        let ring_size = self.port.ring_size as usize;

        let interface = self.port.interface.clone();
        let mut port = XdpPort::open(self.port)?;
        let total = port.total_frames() as usize;
        let sockets: Vec<QueueSocket> = port.take_sockets();
        cfg.rps = self.rps.unwrap_or(if sockets.len() >= cpus.len() {
            RpsMode::Local
        } else {
            RpsMode::Spread
        });
        let umem = sockets[0].umem();
        let fds: Vec<i32> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        let sockets: Vec<SharedSocket> = sockets
            .into_iter()
            .map(|s| Arc::new(Mutex::new(s)))
            .collect();
        // Flow delivery sends replies from spare frames: keep an eighth back.
        let reserve = if self.flows.is_some() { total / 8 } else { 0 };
        let spare = Arc::new(SparePool::new(total, reserve));
        let counters = Arc::new(EngineCounters::new(layout.nr_cpus()));
        let cpu_list: Vec<CpuId> = cpus.iter().collect();
        let hasher = KeyedHasher::random();
        let hub = self.flows.map(|options| {
            Hub::new(
                options,
                hasher.clone(),
                cpu_list.clone(),
                sockets.clone(),
                Arc::clone(&spare),
                umem.clone(),
            )
        });
        let factory: HandlerFactory = match (&hub, self.handler) {
            (Some(hub), _) => {
                let hub = Arc::clone(hub);
                Arc::new(move |_cpu| Box::new(FlowDemux::new(Arc::clone(&hub))))
            }
            (None, Some(f)) => f,
            (None, None) => unreachable_config(),
        };

        // Each worker sleeps on its doorbell and on the sockets it polls.
        let mut sleepers = Vec::with_capacity(cpu_list.len());
        for (j, &cpu) in cpu_list.iter().enumerate() {
            let sleeper = Arc::new(MioSleeper::new()?);
            for (i, &fd) in fds.iter().enumerate() {
                if i % cpu_list.len() == j {
                    sleeper.watch_readable(fd, i)?;
                }
            }
            sleepers.push((cpu, sleeper));
        }
        let setup = Arc::new(EngineSetup {
            topology: topology.clone(),
            pin: self.pin,
            slice: self.worker_slice,
            hasher,
            use_rx_hash: self.use_rx_hash,
            pool: UmemPool {
                umem: umem.clone(),
                spare: Arc::clone(&spare),
                use_rx_hash: self.use_rx_hash,
            },
            tx_sockets: sockets.clone(),
            cpus: cpu_list.clone(),
            ring_size,
            factory,
            counters: Arc::clone(&counters),
            sleepers,
        });
        let sources: Vec<Box<dyn RxSource<RawFrame>>> = sockets
            .iter()
            .map(|s| {
                Box::new(XskSource::new(Arc::clone(s), Arc::clone(&spare), ring_size))
                    as Box<dyn RxSource<RawFrame>>
            })
            .collect();
        let runtime = Runtime::start_with_layout(cfg, layout, setup, sources)?;
        if let Some(hub) = &hub {
            hub.set_shared(runtime.shared().clone());
        }
        info!(
            interface = %interface,
            modes = ?port.modes(),
            queues = sockets.len(),
            cpus = %cpus,
            "steer engine running"
        );
        Ok(Engine {
            runtime: Some(runtime),
            hub,
            port,
            sockets,
            spare,
            counters,
            topology,
            cpus,
            started: Instant::now(),
        })
    }
}

/// The per-CPU parts the runtime builds on each worker's thread.
struct EngineSetup {
    topology: Topology,
    pin: bool,
    slice: Option<Duration>,
    hasher: KeyedHasher,
    use_rx_hash: bool,
    pool: UmemPool,
    tx_sockets: Vec<SharedSocket>,
    cpus: Vec<CpuId>,
    ring_size: usize,
    factory: HandlerFactory,
    counters: Arc<EngineCounters>,
    sleepers: Vec<(CpuId, Arc<MioSleeper>)>,
}

impl Setup<RawFrame> for EngineSetup {
    type Classifier = FlowClassifier<KeyedHasher>;
    type Hook = NoopHook;
    type Pool = UmemPool;
    type Handler = WorkerHandler;

    fn prepare_thread(&self, cpu: CpuId) {
        if self.pin {
            if let Err(e) = self.topology.pin_current_thread(cpu) {
                warn!(cpu, error = %e, "could not pin a worker; it runs unpinned");
            }
        }
        if let Some(slice) = self.slice {
            match sched::set_current_slice(slice) {
                Ok(true) => {}
                Ok(false) => info!(
                    cpu,
                    "worker runs under a real-time policy; slice left alone"
                ),
                Err(e) => warn!(cpu, error = %e, "could not set the worker's scheduling slice"),
            }
        }
    }

    fn classifier(&self, _rxq: u32) -> Self::Classifier {
        FlowClassifier::new(self.hasher.clone()).use_rx_hash(self.use_rx_hash)
    }

    fn hook(&self, _rxq: u32) -> Self::Hook {
        NoopHook
    }

    fn pool(&self, _cpu: CpuId) -> Self::Pool {
        self.pool.clone()
    }

    fn handler(&self, cpu: CpuId) -> Self::Handler {
        let j = self.cpus.iter().position(|&c| c == cpu).unwrap_or(0);
        let socket = Arc::clone(&self.tx_sockets[j % self.tx_sockets.len()]);
        WorkerHandler {
            app: (self.factory)(cpu),
            ctx: PacketContext { cpu },
            umem: self.pool.umem.clone(),
            tx: TxPath::new(socket, Arc::clone(&self.pool.spare), self.ring_size),
            counters: Arc::clone(&self.counters),
            local: WorkerCounts::default(),
        }
    }

    fn sleeper(&self, cpu: CpuId) -> Box<dyn Sleeper> {
        match self.sleepers.iter().find(|(c, _)| *c == cpu) {
            Some((_, s)) => Box::new(SharedSleeper(Arc::clone(s))),
            None => Box::new(steer_core::wake::ThreadSleeper::current()),
        }
    }
}

struct SharedSleeper(Arc<MioSleeper>);

impl Sleeper for SharedSleeper {
    fn sleep(&self, timeout: Duration) {
        self.0.sleep(timeout)
    }
    fn wake(&self) {
        self.0.wake()
    }
}

/// A running engine. Dropping it stops it too, without the report.
pub struct Engine {
    runtime: Option<Runtime>,
    hub: Option<Arc<Hub>>,
    port: XdpPort,
    sockets: Vec<SharedSocket>,
    spare: Arc<SparePool>,
    counters: Arc<EngineCounters>,
    topology: Topology,
    cpus: CpuSet,
    started: Instant,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("interface", &self.port.ifindex())
            .field("cpus", &self.cpus)
            .field("queues", &self.sockets.len())
            .finish_non_exhaustive()
    }
}

/// How long [`Engine::stop`] waits for transmissions to complete.
const TX_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Engine {
    /// Settings for an engine on `interface`.
    pub fn builder(interface: &str) -> EngineBuilder {
        EngineBuilder::new(interface)
    }

    fn runtime(&self) -> &Runtime {
        // Present from start until stop/drop consume it.
        self.runtime
            .as_ref()
            .expect("engine runtime present until stop")
    }

    /// Switches the desired-table update policy for later records.
    pub fn set_policy(&self, policy: Policy) {
        self.runtime().shared().desired.policy().set(policy);
    }

    /// Turns the same-CPU fast path on or off.
    pub fn set_fast_path(&self, on: bool) {
        self.runtime()
            .shared()
            .switches
            .fast_path
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The shared tables and switches (for recording consumption, pins).
    pub fn shared(&self) -> &steer_core::dispatch::Shared {
        self.runtime().shared()
    }

    /// The listener of new flows ([`AcceptMode::Single`](crate::flows::AcceptMode::Single)
    /// flow delivery; `None` otherwise).
    pub fn listener(&self) -> Option<FlowListener> {
        self.hub.as_ref()?.listener(None)
    }

    /// The listener of the flows first received on `cpu`
    /// ([`AcceptMode::PerCpu`](crate::flows::AcceptMode::PerCpu) flow
    /// delivery; `None` otherwise or for a CPU without a worker).
    pub fn listener_for(&self, cpu: CpuId) -> Option<FlowListener> {
        self.hub.as_ref()?.listener(Some(cpu))
    }

    /// Runs every flow to UDP/TCP port `port` on `cpu` (explicit affinity
    /// for a listener's work; overrides learning, like [`Flow::pin_to`](crate::flows::Flow::pin_to)).
    pub fn pin_port(&self, port: u16, cpu: CpuId) {
        self.shared().pins.pin_port(port, cpu);
    }

    /// Removes a [`Engine::pin_port`].
    pub fn unpin_port(&self, port: u16) {
        self.shared().pins.unpin_port(port);
    }

    /// Flow-delivery counters (`None` without flow delivery).
    pub fn flow_stats(&self) -> Option<HubStats> {
        Some(self.hub.as_ref()?.stats())
    }

    /// The topology the LLC rule uses.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The modes in use (XDP attach, bind, huge pages).
    pub fn modes(&self) -> xdp_io::ActiveModes {
        self.port.modes()
    }

    /// Counters now (exact once workers flushed their batch).
    pub fn stats(&self) -> EngineStats {
        self.collect(self.runtime().shared())
    }

    fn collect(&self, shared: &steer_core::dispatch::Shared) -> EngineStats {
        EngineStats::collect(
            &self.cpus,
            &shared.stats.snapshot(),
            &self.counters,
            shared.desired.stats(),
            shared.desired.policy().get(),
            shared
                .switches
                .fast_path
                .load(std::sync::atomic::Ordering::Relaxed),
            self.started.elapsed(),
        )
    }

    /// Each worker's state (a panicked handler shows here).
    pub fn worker_states(&self) -> Vec<(CpuId, WorkerState)> {
        self.runtime().worker_states()
    }

    /// The XDP program's counters (redirected, passed, ...).
    pub fn program_stats(&self) -> Result<ProgramStats, EngineError> {
        Ok(self.port.program_stats()?)
    }

    /// Stops the workers (each handles what is queued to it), waits for
    /// transmissions to complete, returns every frame to the sockets, takes
    /// the frame census and detaches the program.
    pub fn stop(mut self) -> Result<EngineReport, EngineError> {
        let program = self.port.program_stats().ok();
        // Readers and acceptors see the end; replies stop before the sockets go.
        if let Some(hub) = &self.hub {
            hub.stop();
        }
        let runtime = self
            .runtime
            .take()
            .expect("engine runtime present until stop");
        let shared = runtime.shared().clone();
        let states = runtime.stop();
        // Workers flushed their counters on the way out.
        let final_stats = self.collect(&shared);
        let (census, kernel) = self.settle()?;
        let report = EngineReport {
            stats: final_stats,
            census,
            kernel,
            spare_lost: self.spare.lost.load(std::sync::atomic::Ordering::Relaxed),
            workers: states,
            program,
        };
        Ok(report)
    }

    /// After the workers stopped: completions in, spare frames back into the
    /// sockets, census.
    fn settle(&mut self) -> Result<(FrameCensus, SocketStats), EngineError> {
        let deadline = Instant::now() + TX_DRAIN_TIMEOUT;
        for socket in &self.sockets {
            let mut s = lock(socket);
            while s.counters().in_tx > 0 && Instant::now() < deadline {
                if s.complete() == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let mut scratch = Vec::new();
        if let Some(first) = self.sockets.first() {
            let mut s = lock(first);
            self.spare.top_up(&mut s, usize::MAX, true, &mut scratch);
        }
        let mut owned = Vec::with_capacity(self.sockets.len());
        for socket in self.sockets.drain(..) {
            match Arc::try_unwrap(socket) {
                Ok(m) => owned.push(m.into_inner().unwrap_or_else(|p| p.into_inner())),
                Err(_) => {
                    return Err(EngineError::Config(
                        "a socket is still shared after the workers stopped".into(),
                    ))
                }
            }
        }
        let census = self.port.census(&mut owned);
        let mut kernel = SocketStats::default();
        for s in &owned {
            if let Ok(k) = s.kernel_stats() {
                kernel.rx_dropped += k.rx_dropped;
                kernel.rx_invalid_descs += k.rx_invalid_descs;
                kernel.rx_ring_full += k.rx_ring_full;
                kernel.rx_fill_ring_empty += k.rx_fill_ring_empty;
                kernel.tx_invalid_descs += k.tx_invalid_descs;
                kernel.tx_ring_empty += k.tx_ring_empty;
            }
        }
        drop(owned);
        Ok((census, kernel))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(hub) = &self.hub {
            hub.stop();
        }
        if let Some(rt) = self.runtime.take() {
            rt.stop();
        }
    }
}
