//! The engine: steer's runtime on an AF_XDP port. [`EngineBuilder`] takes
//! the interface, queues, CPUs, update policy, fast path, sleep or busy-poll,
//! ring and table sizes, the owned traffic and the handler; [`Engine`] owns
//! the XDP program, the UMEM and its sockets, and the pinned workers, and
//! [`Engine::stop`] drains, returns every frame, checks the frame census and
//! detaches the program.
//!
//! Wiring (one UMEM, one socket per rx queue, one worker per CPU):
//! - rx queue `i`'s socket is polled and dispatched by the `i % n`-th worker
//!   (an [`XskSource`](steer_xdp::frames::XskSource));
//! - the worker on the `j`-th CPU transmits on socket `j % queues` (sockets
//!   are shared through a mutex taken once per batch; with as many queues as
//!   CPUs each socket has one rx and one tx user on the same thread);
//! - handlers release frames to a spare pool that sockets top up from;
//! - a kernel UDP socket on each owned UDP port (the slow path) gets the
//!   datagrams the kernel reassembled from fragments, which the XDP
//!   program leaves to it; a thread of its own hands each to the worker of
//!   its flow, whose handler answers it through that socket
//!   ([`PacketContext::from_kernel`]).
//!
//! ```no_run
//! use steer_engine::engine::{Engine, Verdict};
//! use steer_xdp::Proto;
//! # fn main() -> Result<(), steer_engine::engine::EngineError> {
//! let engine = Engine::builder("veth0")
//!     .own(Proto::Udp, 9000)
//!     .handler(|_cpu| Box::new(|packet: &mut [u8], _ctx: &steer_engine::engine::PacketContext| {
//!         Verdict::Transmit(packet.len()) // an echo that does not even swap addresses
//!     }))
//!     .start()?;
//! println!("{}", engine.stats().table(None));
//! let report = engine.stop()?;
//! assert!(report.census_ok());
//! # Ok(()) }
//! ```

mod app;
mod builder;
mod counters;
/// Worker health: deaths logged, the loss of every worker acted on.
mod health;
mod hotplug;
mod nic_check;
mod privileges;
mod publish;
mod setup;
/// Fragmented UDP datagrams: the kernel reassembles, the engine answers.
mod slow_path;
mod start;
mod stats;
mod steering;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::policy::Policy;
pub use steer_core::runtime::RpsMode;
use steer_core::runtime::{RuntimeError, WorkerState};
use steer_topology::Topology;
use steer_xdp::{FrameCensus, ProgramStats, RawFrame, SocketStats, XdpError, XdpPort};

pub use crate::observe::control::{Control, ControlParseError, Controls};
pub use app::{Application, EngineParts, HandlerFactory, PacketContext, PacketHandler, Verdict};
pub use builder::EngineBuilder;
pub use counters::WorkerCounts;
pub use health::WorkerLoss;
pub use stats::{CpuRow, EngineReport, EngineStats, MultiBufferStats};
pub use steering::FlowSteerError;

use counters::EngineCounters;
use setup::EngineSetup;
pub(crate) use slow_path::KernelSender;

use crate::observe::{LiveStats, ObserveError, Observer};
use publish::Publisher;
use steer_xdp::frames::{lock, SharedSocket, SparePool};

type Runtime = steer_core::runtime::Runtime<RawFrame, EngineSetup>;

/// The scheduling slice workers ask for unless told otherwise
/// ([`EngineBuilder::worker_slice`]): the shortest the kernel grants.
pub const DEFAULT_WORKER_SLICE: Duration = Duration::from_micros(100);

/// How often the engine re-reads which CPUs are online unless told
/// otherwise ([`EngineBuilder::hotplug_watch`]).
pub const DEFAULT_HOTPLUG_WATCH: Duration = Duration::from_millis(100);

/// Why the engine could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The AF_XDP side (privileges, interface, XDP mode, UMEM, sockets).
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The CPU topology could not be read.
    #[error("reading the CPU topology: {0}")]
    Topology(#[from] steer_topology::Error),
    /// The runtime refused the settings.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// A worker's event loop (or the observer thread) could not be set up.
    #[error("setting up a worker's event loop: {0}")]
    Io(#[from] std::io::Error),
    /// The stats socket could not be claimed (another engine serves the
    /// interface, or the directory is not writable).
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// The capabilities could not be dropped after setup
    /// ([`EngineBuilder::drop_privileges`]).
    #[error("dropping the capabilities the engine no longer needs: {0}")]
    Privileges(String),
    /// The metrics address could not be bound.
    #[error(
        "cannot serve metrics on {addr}: {source} (another process on that port? pick another \
         address, or port 0 for a free one)"
    )]
    Metrics {
        /// The address asked for.
        addr: SocketAddr,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// A running engine. Dropping it stops it too, without the report.
pub struct Engine {
    runtime: Option<Runtime>,
    /// The application layer (a handler factory, flow delivery), as the
    /// workers run it and as its owner looks it up again.
    app: Arc<dyn Application>,
    app_any: Arc<dyn std::any::Any + Send + Sync>,
    port: XdpPort,
    sockets: Vec<SharedSocket>,
    spare: Arc<SparePool>,
    counters: Arc<EngineCounters>,
    topology: Topology,
    cpus: CpuSet,
    started: Instant,
    /// The trace being recorded, if any.
    trace: Option<crate::trace::TraceWriter>,
    /// Follows CPUs going offline and online (live topologies).
    hotplug: Option<hotplug::HotplugWatcher>,
    /// Follows the workers: deaths logged, the loss of all acted on.
    health: Option<health::HealthWatcher>,
    health_state: Arc<health::Health>,
    /// What the start-time check of the NIC's setup found.
    start_warnings: Vec<String>,
    /// Builds [`LiveStats`]; dropped before the sockets are released.
    publisher: Option<Arc<Publisher>>,
    /// Serves the stats socket and `/metrics`; stopped first.
    observer: Option<Observer>,
    metrics_addr: Option<SocketAddr>,
    stats_path: Option<PathBuf>,
    /// Set before the workers stop: tasks on the workers get a grace period.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The slow path (reassembled datagrams) and its reader thread.
    slow: Arc<slow_path::SlowPath>,
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

    /// Turns the load balancer on or off ([`EngineBuilder::balance`]). Off,
    /// its assignments are dropped and the flows go back to plain RPS
    /// (through `last_qtail`: never reordered).
    pub fn set_balance(&self, on: bool) {
        self.runtime().shared().balance.set_on(on);
    }

    /// Turns the same-CPU fast path on or off.
    pub fn set_fast_path(&self, on: bool) {
        self.runtime()
            .shared()
            .switches
            .fast_path
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Turns the per-CPU flow limit on or off
    /// ([`EngineBuilder::flow_limit`] sets its table and turns it on at
    /// start).
    pub fn set_flow_limit(&self, on: bool) {
        self.runtime()
            .shared()
            .switches
            .flow_limit
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The shared tables and switches (for recording consumption, pins).
    pub fn shared(&self) -> &steer_core::dispatch::Shared {
        self.runtime().shared()
    }

    /// The application layer the engine runs, if it is an `A` (flow
    /// delivery uses this to reach its state from the engine).
    pub fn application<A: Application>(&self) -> Option<Arc<A>> {
        Arc::clone(&self.app_any).downcast::<A>().ok()
    }

    /// Runs every flow to UDP/TCP port `port` on `cpu` (explicit affinity
    /// for a listener's work; overrides learning, like a flow's own pin).
    pub fn pin_port(&self, port: u16, cpu: CpuId) {
        self.shared().pins.pin_port(port, cpu);
    }

    /// Removes a [`Engine::pin_port`].
    pub fn unpin_port(&self, port: u16) {
        self.shared().pins.unpin_port(port);
    }

    /// The topology the LLC rule uses.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// What the start-time check of the NIC's setup found, one line each
    /// (also logged as warnings): rx queues without a steer socket, an RSS
    /// indirection table sending flows past steer's queues or none to some
    /// of them, queue interrupts on other CPUs than the queue's dispatcher,
    /// or what cannot be checked on this device (veth has no RSS table or
    /// queue interrupts). Empty for a NIC set up as the README says.
    pub fn start_warnings(&self) -> &[String] {
        &self.start_warnings
    }

    /// The modes in use (XDP attach, bind, huge pages).
    pub fn modes(&self) -> steer_xdp::ActiveModes {
        self.port.modes()
    }

    /// Counters now (exact once workers flushed their batch).
    pub fn stats(&self) -> EngineStats {
        self.collect(self.runtime().shared())
    }

    fn collect(&self, shared: &steer_core::dispatch::Shared) -> EngineStats {
        let mut stats =
            EngineStats::collect(&self.cpus, shared, &self.counters, self.started.elapsed());
        stats.multi_buffer = self.port.counters().into();
        stats.slow_path = self.slow.stats();
        stats
    }

    /// What the stats socket and `/metrics` publish: per-CPU counters, the
    /// kernel's statistics of each AF_XDP socket, the frame census.
    pub fn live_stats(&self) -> LiveStats {
        self.publisher
            .as_ref()
            .expect("engine publisher present until stop")
            .snapshot()
    }

    /// Where `/metrics` is served ([`EngineBuilder::metrics`]), with the
    /// port the kernel picked for port 0.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The stats socket `steer stats` reads ([`EngineBuilder::stats_dir`]).
    pub fn stats_socket(&self) -> Option<&Path> {
        self.stats_path.as_deref()
    }

    /// Whether every worker is gone (each handler panicked): with
    /// [`WorkerLoss::FailOpen`] the kernel gets the owned traffic now; with
    /// [`WorkerLoss::FailClosed`] the caller should stop the engine.
    pub fn workers_lost(&self) -> bool {
        self.health_state
            .all_lost
            .load(std::sync::atomic::Ordering::Relaxed)
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
        if let Some(mut h) = self.hotplug.take() {
            h.stop();
        }
        if let Some(mut h) = self.health.take() {
            h.stop();
        }
        // Readers see the engine gone from here on; the observer's handles
        // on the sockets go before the sockets are released.
        if let Some(mut o) = self.observer.take() {
            o.stop();
        }
        self.publisher = None;
        // Nothing more reaches the workers' slow-path inboxes.
        self.slow.stop_reader();
        let program = self.port.program_stats().ok();
        // Readers and acceptors see the end; replies stop before the sockets go.
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.app.stop();
        let runtime = self
            .runtime
            .take()
            .expect("engine runtime present until stop");
        let shared = runtime.shared().clone();
        let states = runtime.stop();
        // What no worker took from its slow-path inbox is dropped, counted.
        self.slow.drop_leftovers();
        // Nothing records any more: close the trace.
        let trace = self.trace.take().map(crate::trace::TraceWriter::finish);
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
            trace,
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
        if let Some(mut h) = self.health.take() {
            h.stop();
        }
        if let Some(mut o) = self.observer.take() {
            o.stop();
        }
        self.slow.stop_reader();
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.app.stop();
        if let Some(rt) = self.runtime.take() {
            rt.stop();
        }
        drop(self.trace.take());
    }
}
