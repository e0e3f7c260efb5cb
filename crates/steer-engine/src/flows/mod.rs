//! Flow delivery for proxies: each UDP flow (5-tuple) the engine receives
//! appears to the application as a [`Flow`] it reads (an async `recv`, or
//! `try_recv` from a mio loop) and a [`FlowWriter`] it replies with.
//!
//! How it fits RFS: the engine's workers hand each packet to a per-worker
//! demultiplexer (`deliver`), which copies the payload into the flow's
//! bounded queue and wakes its reader. Reading a datagram records the
//! reading thread's CPU for the flow through the update rule (LLC affinity
//! by default), so the dispatcher steers the flow's next packets to the
//! worker on that CPU: the packet is handled where the task that consumes
//! it runs. [`Flow::pin_to`] and [`Engine::pin_port`](crate::engine::Engine::pin_port)
//! name the CPU explicitly instead (seed 001).
//!
//! New flows are offered on a [`FlowListener`]: one for the whole engine
//! ([`AcceptMode::Single`], for a tokio multi-thread runtime), or one per
//! worker CPU ([`AcceptMode::PerCpu`], for one current_thread runtime per
//! pinned core: a flow is offered on the CPU whose worker received it).
//!
//! Or the flows' tasks run on the engine's workers themselves
//! ([`EngineBuilder::deliver_flows_on_workers`], thread-per-core): each
//! worker runs an acceptor task of the application's on its own thread,
//! with its CPU's listener, and the tasks it spawns
//! (`tokio::task::spawn_local`) read their flows there. A datagram then goes
//! from the AF_XDP ring to the task that reads it on the same thread: the
//! worker wakes the reader and runs it at the end of the round, and sleeps
//! in the tasks' event loop, so no thread is woken in between.
//!
//! Flow state is bounded ([`FlowBudget`], in [`FlowOptions::budget`]):
//! the most open flows in all and per worker, derived at start from the
//! descriptors and memory the process has, and a new-flow rate per source
//! address. At the budget the flow table evicts unassured flows first
//! (no datagram after a reply: probes, spoofed sprays), then the least
//! recently active, or refuses the new flow; an evicted flow's `recv` ends.
//! While the budget is full, the XDP program's new-flow gate drops the
//! first datagram of every flow not admitted, before it reaches a worker,
//! and lets its retry through ([`FlowOptions::xdp_gate`], see `gate`).
//! A spray of new flows therefore costs the sprayer, not the established
//! flows (see `table`).
//!
//! ```no_run
//! use steer_engine::engine::Engine;
//! use steer_engine::flows::FlowOptions;
//! use steer_xdp::Proto;
//! # async fn proxy() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder("veth0")
//!     .own(Proto::Udp, 5353)
//!     .deliver_flows(FlowOptions::default())
//!     .start()?;
//! let listener = engine.listener().expect("flow delivery is on");
//! while let Some(mut flow) = listener.accept().await {
//!     tokio::spawn(async move {
//!         while let Some(datagram) = flow.recv().await {
//!             let _ = flow.send(&datagram); // echo
//!         }
//!     });
//! }
//! # Ok(()) }
//! ```

mod budget;
mod deliver;
mod flow;
mod gate;
mod listener;
mod notify;
mod overload;
mod reply;
mod retries;
mod table;

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::Instant;

use steer_core::cpu::CpuId;
use steer_core::dispatch::Shared;
use steer_core::flow::{AnyHasher, FlowHasher, FlowKey};
use steer_core::record::Recorder;
use steer_xdp::Frame;
use tracing::warn;

use crate::engine::{Application, Engine, EngineBuilder, EngineParts, KernelSender, PacketHandler};
use crate::probe::LiveProbe;
use steer_xdp::frames::{lock, scatter, send_or_recycle, TxResources};

/// Flow-delivery counters (defined with the snapshot the observer publishes).
pub use crate::observe::HubStats;
pub use budget::{grow_fd_table, FlowBudget, FlowLimits, HostResources, FLOW_BYTES, RESERVED_FDS};
pub(crate) use deliver::FlowDemux;
use flow::FlowShared;
pub use flow::{Flow, FlowStats, FlowWriter, Recv};
pub use listener::{Accept, FlowListener};
pub use notify::MioNotifier;
use overload::Overload;
use reply::ReplyTemplate;
use table::{FlowTable, Refusal, TableCounts};

/// Where new flows are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcceptMode {
    /// One listener for all flows (a multi-thread runtime accepts them).
    #[default]
    Single,
    /// One listener per worker CPU: a flow is offered on the CPU whose
    /// worker received its first packet (one runtime per pinned core).
    PerCpu,
}

/// Settings of flow delivery.
///
/// ```
/// use steer_engine::flows::{FlowBudget, FlowOptions};
/// let options = FlowOptions {
///     budget: FlowBudget { max_flows: 50_000, new_flows_per_source: 500, ..FlowBudget::default() },
///     ..FlowOptions::default()
/// };
/// assert_eq!(options.queue_depth, 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowOptions {
    /// Datagrams queued per flow before its own datagrams are dropped.
    pub queue_depth: usize,
    /// New flows waiting to be accepted before new flows are dropped.
    pub backlog: usize,
    /// New flows a listener may have offered and not yet seen read
    /// (waiting to be accepted, or accepted and waiting for their task's
    /// first `recv`): past it new flows are refused (counted as
    /// `overload`). The new-flow analog of a SYN backlog: it bounds the
    /// work a spray can queue in the application's runtime ahead of the
    /// established flows' tasks, at once, where the wait-based shedding
    /// (see `overload`) needs an interval to see a queue.
    pub max_starting: usize,
    /// One listener, or one per CPU.
    pub accept: AcceptMode,
    /// How many flows may be open, and how fast one source may open them.
    pub budget: FlowBudget,
    /// While the budget is full, drop the first datagram of every new
    /// flow in the XDP program, before it costs a worker anything, and let
    /// its retry through (see [`steer_xdp::AdmissionGate`]). On by
    /// default.
    pub xdp_gate: bool,
}

impl Default for FlowOptions {
    fn default() -> Self {
        Self {
            queue_depth: 256,
            backlog: 1024,
            max_starting: 64,
            accept: AcceptMode::Single,
            budget: FlowBudget::default(),
            xdp_gate: true,
        }
    }
}

/// Why a reply was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The engine has stopped.
    #[error("the engine has stopped")]
    Stopped,
    /// No free UMEM frame right now (retry later; raise the frame count).
    #[error("no free UMEM frame to send from; retry, or give the engine more frames")]
    NoFrames,
    /// Headers + payload exceed the frame size or a 16-bit length.
    #[error("the reply does not fit one frame")]
    TooLarge,
    /// The socket's tx ring stayed full.
    #[error("the AF_XDP tx ring is full; retry")]
    TxFull,
}

/// Monotonic nanoseconds since the first call (the per-source buckets' clock).
fn mono_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The flow table and when refusals were last logged.
struct Admissions {
    table: FlowTable,
    logged_ns: u64,
    logged: TableCounts,
}

static NEXT_HUB_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// One recorder per (thread, engine): the rps_record_sock_flow handle.
    static RECORDERS: RefCell<Vec<(usize, Recorder<LiveProbe>)>> = const { RefCell::new(Vec::new()) };
    /// The one-frame batch a reply goes out in.
    static SEND_SCRATCH: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Flow delivery state shared by the workers' demultiplexers, listeners and
/// flows of one engine.
pub(crate) struct Hub {
    id: usize,
    options: FlowOptions,
    /// The listeners are served by acceptor tasks on the workers.
    on_workers: bool,
    hasher: AnyHasher,
    cpus: Vec<CpuId>,
    flows: Mutex<Admissions>,
    accept: Vec<listener::AcceptQueue>,
    shared: Shared,
    /// Where consumption is recorded for a trace, when recording.
    trace: Option<Arc<crate::trace::TraceSink>>,
    /// The transmit resources replies use (taken away at stop).
    tx: RwLock<Option<TxResources>>,
    /// Replies AF_XDP cannot carry (a flow born from a datagram the kernel
    /// reassembled, a reply longer than a frame) leave through the kernel.
    kernel: KernelSender,
    /// The interface's MTU (0: unknown): longer replies go through
    /// `kernel`, which fragments them.
    mtu: u32,
    stopped: AtomicBool,
    accepted: AtomicU64,
    accept_drops: AtomicU64,
    backend_errors: AtomicU64,
    overload: Overload,
    overload_refused: AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("id", &self.id)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Hub {
    pub(crate) fn new(options: FlowOptions, parts: &EngineParts, on_workers: bool) -> Self {
        let listeners = match options.accept {
            AcceptMode::Single => 1,
            AcceptMode::PerCpu => parts.cpus.len().max(1),
        };
        let host = HostResources::measure(true);
        let limits = options.budget.resolve(parts.cpus.len(), &host);
        let fds = limits.fds_at_budget(options.budget.fds_per_flow, &host);
        if let Err(e) = grow_fd_table(fds) {
            tracing::debug!(fds, error = %e, "descriptor table not grown ahead");
        }
        tracing::info!(
            max_flows = limits.max_flows,
            per_worker = limits.max_flows_per_worker,
            new_flows_per_source = limits.new_flows_per_source,
            "flow budget"
        );
        Self {
            id: NEXT_HUB_ID.fetch_add(1, Ordering::Relaxed),
            options,
            on_workers,
            hasher: parts.hasher.clone(),
            cpus: parts.cpus.clone(),
            flows: Mutex::new(Admissions {
                table: FlowTable::new(limits, parts.cpus.len()).with_gate(gate::FlowGate::new(
                    parts.gate.clone().filter(|_| options.xdp_gate),
                )),
                logged_ns: 0,
                logged: TableCounts::default(),
            }),
            accept: (0..listeners)
                .map(|_| listener::AcceptQueue::new(options.backlog, options.max_starting))
                .collect(),
            shared: parts.shared.clone(),
            trace: parts.trace.clone(),
            tx: RwLock::new(Some(parts.tx.clone())),
            kernel: parts.kernel.clone(),
            mtu: parts.mtu,
            stopped: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            accept_drops: AtomicU64::new(0),
            backend_errors: AtomicU64::new(0),
            overload: Overload::default(),
            overload_refused: AtomicU64::new(0),
        }
    }

    /// A flow's first datagram was read: how long its start waited.
    pub(crate) fn first_read(&self, flow: &FlowShared, listener: usize) {
        self.accept[listener].end_start();
        let now = mono_ns();
        self.overload.sample(now.saturating_sub(flow.born_ns), now);
    }

    /// A flow offered on `listener` was dropped before its first read.
    pub(crate) fn start_abandoned(&self, listener: usize) {
        self.accept[listener].end_start();
    }

    fn admissions(&self) -> MutexGuard<'_, Admissions> {
        self.flows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits the budget resolved to at start.
    pub(crate) fn limits(&self) -> FlowLimits {
        *self.admissions().table.limits()
    }

    /// Lowers the budget to `max_flows`; the limits now.
    pub(crate) fn limit_flows(&self, max_flows: usize) -> FlowLimits {
        let mut a = self.admissions();
        a.table.limit(max_flows);
        *a.table.limits()
    }

    pub(crate) fn count_backend_error(&self) {
        self.backend_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn listener(self: &Arc<Self>, cpu: Option<CpuId>) -> Option<FlowListener> {
        if self.on_workers {
            // Each is its worker's acceptor's (one task per listener).
            return None;
        }
        self.listener_of(cpu)
    }

    fn listener_of(self: &Arc<Self>, cpu: Option<CpuId>) -> Option<FlowListener> {
        let index = match (self.options.accept, cpu) {
            (AcceptMode::Single, None) => 0,
            (AcceptMode::PerCpu, Some(cpu)) => self.cpus.iter().position(|&c| c == cpu)?,
            _ => return None,
        };
        Some(FlowListener::new(Arc::clone(self), index))
    }

    fn accept_index(&self, cpu: CpuId) -> usize {
        match self.options.accept {
            AcceptMode::Single => 0,
            AcceptMode::PerCpu => self.cpus.iter().position(|&c| c == cpu).unwrap_or(0),
        }
    }

    pub(crate) fn hash(&self, key: &FlowKey) -> u32 {
        self.hasher.hash(key)
    }

    /// The open flow of `key`, or a new one offered to the listener of
    /// `cpu` (built from `frame`, its first packet, dispatched under flow
    /// hash `hash`; 0: hash it with the engine's hasher) if the budget
    /// admits it. `None`: not a UDP datagram, refused by the budget, or the
    /// backlog is full (counted).
    pub(crate) fn flow_for(
        self: &Arc<Self>,
        key: FlowKey,
        hash: u32,
        frame: &[u8],
        cpu: CpuId,
        from_kernel: bool,
    ) -> Option<Arc<FlowShared>> {
        let mut guard = self.admissions();
        let admissions = &mut *guard;
        if let Some(f) = admissions.table.get(&key) {
            return Some(Arc::clone(f));
        }
        let template = ReplyTemplate::from_request(frame)?.through_kernel(from_kernel);
        let home = self.cpus.iter().position(|&c| c == cpu).unwrap_or(0);
        let now = mono_ns();
        let listener = self.accept_index(cpu);
        let queue = &self.accept[listener];
        // Checked first: a refusal here costs no table work. A retry of a
        // refused flow (a client whose request went unanswered) is spared
        // the admission delay's verdict, not the start bound; the table
        // then paces it with the retries.
        let retry = admissions.table.refused_before(&key) || admissions.table.gate_closed();
        if queue.is_starting_full() || (!retry && !self.overload.admit(now)) {
            admissions.table.remember_refused(&key);
            self.overload_refused.fetch_add(1, Ordering::Relaxed);
            Self::log_refusals(admissions, "overload", now);
            return None;
        }
        if let Err(refusal) = admissions.table.admit(&key, home, now) {
            let why = match refusal {
                Refusal::Full => "budget full",
                Refusal::RateLimited => "rate limited",
            };
            Self::log_refusals(admissions, why, now);
            return None;
        }
        let hash = if hash != 0 { hash } else { self.hash(&key) };
        let shared = Arc::new(FlowShared::new(
            key,
            hash,
            self.options.queue_depth,
            template,
            home,
            now,
        ));
        queue.begin_start();
        if let Err(unoffered) =
            queue.offer(Flow::new(Arc::clone(&shared), Arc::clone(self), listener))
        {
            self.accept_drops.fetch_add(1, Ordering::Relaxed);
            // The backlog is full. Dropped unread, the flow gives its start
            // back and forgets itself, which takes the admissions lock:
            // released first.
            drop(guard);
            drop(unoffered);
            return None;
        }
        admissions.table.insert(Arc::clone(&shared));
        self.accepted.fetch_add(1, Ordering::Relaxed);
        Some(shared)
    }

    /// At most one line a second while new flows are refused, with what
    /// was refused since the last.
    fn log_refusals(a: &mut Admissions, why: &str, now: u64) {
        if now.saturating_sub(a.logged_ns) < 1_000_000_000 && a.logged_ns != 0 {
            return;
        }
        let c = a.table.counts;
        warn!(
            open = a.table.open(),
            max_flows = a.table.limits().max_flows,
            refused = c.refused - a.logged.refused,
            rate_limited = c.rate_limited - a.logged.rate_limited,
            evicted = c.evicted_unassured + c.evicted_idle
                - a.logged.evicted_unassured
                - a.logged.evicted_idle,
            "new flows refused ({why}): the flow budget is full of active flows, a source is over \
             its new-flow rate, or the application is falling behind; raise --max-flows / \
             --new-flows-per-source if this is real traffic"
        );
        a.logged_ns = now;
        a.logged = c;
    }

    /// A flow's reader was dropped: its place in the budget is free.
    pub(crate) fn forget(&self, flow: &Arc<FlowShared>) {
        self.admissions().table.remove(flow);
        while flow.pop().is_some() {}
    }

    /// Records the calling thread's CPU for flow `hash` (the RFS step).
    pub(crate) fn record(&self, hash: u32) {
        let shared = &self.shared;
        RECORDERS.with(|r| {
            let mut r = r.borrow_mut();
            let rec = match r.iter().position(|(id, _)| *id == self.id) {
                Some(i) => &mut r[i].1,
                None => {
                    r.push((
                        self.id,
                        Recorder::new(
                            Arc::clone(&shared.desired),
                            Arc::clone(&shared.layout),
                            LiveProbe,
                        ),
                    ));
                    &mut r.last_mut().expect("just pushed").1
                }
            };
            // A table refusal (CPU outside the table) only loses the hint.
            let (cpu, _) = rec.record_on(hash);
            if let Some(trace) = &self.trace {
                trace.consumed(hash, cpu, rec.allowed());
            }
        });
    }

    pub(crate) fn pin_flow(&self, hash: u32, cpu: CpuId) {
        self.shared.pins.pin_flow(hash, cpu);
    }

    pub(crate) fn unpin_flow(&self, hash: u32) {
        self.shared.pins.unpin_flow(hash);
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The engine is stopping: no more sends; readers and acceptors see the end.
    fn shut(&self) {
        self.stopped.store(true, Ordering::Release);
        *self.tx.write().unwrap_or_else(PoisonError::into_inner) = None;
        for q in &self.accept {
            q.readiness.notify();
        }
        let admissions = self.admissions();
        for f in admissions.table.flows() {
            f.readiness.notify();
        }
    }

    pub(crate) fn stats(&self) -> HubStats {
        let a = self.admissions();
        let c = a.table.counts;
        let gate_closed = a.table.gate_closed();
        let gate_closings = a.table.gate.closings;
        let xdp = a.table.gate.xdp();
        drop(a);
        // Two map reads: outside the admissions lock.
        let gate = xdp.map(|x| x.counts()).unwrap_or_default();
        let a = self.admissions();
        HubStats {
            gate_closed,
            gate_closings,
            gate_dropped: gate.dropped,
            gate_retries: gate.retries,
            accepted: self.accepted.load(Ordering::Relaxed),
            accept_drops: self.accept_drops.load(Ordering::Relaxed),
            open: a.table.open() as u64,
            max_flows: a.table.limits().max_flows as u64,
            refused: c.refused,
            rate_limited: c.rate_limited,
            overload: self.overload_refused.load(Ordering::Relaxed),
            evicted_unassured: c.evicted_unassured,
            evicted_idle: c.evicted_idle,
            backend_errors: self.backend_errors.load(Ordering::Relaxed),
        }
    }

    /// Sends `payload` on `flow` from the socket of the calling thread's
    /// CPU; through the kernel's socket on the owned port instead for a
    /// flow born from a datagram the kernel reassembled, or a reply longer
    /// than the link's MTU or a frame (the kernel fragments it).
    pub(crate) fn send(&self, flow: &FlowShared, payload: &[u8]) -> Result<(), SendError> {
        let tx = self.tx.read().unwrap_or_else(PoisonError::into_inner);
        let tx = tx.as_ref().ok_or(SendError::Stopped)?;
        let over_mtu = self.mtu > 0 && flow.template.ip_len_for(payload.len()) > self.mtu as usize;
        if flow.template.is_through_kernel() || over_mtu {
            let failed = if over_mtu {
                SendError::TooLarge
            } else {
                SendError::TxFull
            };
            return self.send_through_kernel(flow, payload, failed);
        }
        let cpu = steer_topology::thread::current_cpu().unwrap_or(0);
        let index = self.cpus.iter().position(|&c| c == cpu).unwrap_or(cpu);
        let socket = &tx.sockets[index % tx.sockets.len()];
        // The spare pool first; when it is empty (chains of multi-buffer
        // replies drain it faster), the socket's own free pool.
        let mut frame = match tx.spare.take() {
            Some(f) => f,
            None => {
                let mut one = Vec::with_capacity(1);
                lock(socket).alloc(1, &mut one);
                one.pop().ok_or(SendError::NoFrames)?
            }
        };
        tx.umem.set_len(&mut frame, usize::MAX);
        let written = tx
            .umem
            .with_data_mut(&mut frame, |buf| flow.template.write(buf, payload))
            .unwrap_or(Err(reply::TooLarge));
        let outgoing = match written {
            Ok(len) => {
                tx.umem.set_len(&mut frame, len);
                Outgoing::One(frame)
            }
            Err(reply::TooLarge) if tx.multi_buffer => {
                // Longer than one frame: the packet is built whole, then
                // written across a chain of frames (a multi-buffer reply).
                let mut packet = vec![0u8; flow.template.len_for(payload.len())];
                let len = match flow.template.write(&mut packet, payload) {
                    Ok(len) => len,
                    Err(reply::TooLarge) => {
                        tx.spare.put(frame);
                        return self.send_through_kernel(flow, payload, SendError::TooLarge);
                    }
                };
                let mut s = lock(socket);
                match scatter(&tx.umem, &tx.spare, frame, &packet[..len], Some(&mut s)) {
                    Some(chain) => Outgoing::Chain(chain),
                    None => {
                        s.count_multi_refused();
                        return Err(SendError::NoFrames);
                    }
                }
            }
            Err(reply::TooLarge) => {
                tx.spare.put(frame);
                return self.send_through_kernel(flow, payload, SendError::TooLarge);
            }
        };
        let mut socket = lock(socket);
        // One reusable vector per thread: no allocation per reply.
        let counts = SEND_SCRATCH.with(|scratch| {
            let mut one = scratch.borrow_mut();
            match outgoing {
                Outgoing::Chain(chain) => one.extend(chain),
                Outgoing::One(frame) => one.push(frame),
            }
            send_or_recycle(&mut socket, &mut one, &tx.spare)
        });
        if counts.dropped > 0 {
            return Err(SendError::TxFull);
        }
        flow.sent.fetch_add(1, Ordering::Relaxed);
        flow.replied();
        Ok(())
    }
}

impl Hub {
    /// Sends `payload` on `flow` through the kernel's UDP socket on the
    /// owned port (the slow path's); `failed` is the error when it cannot.
    fn send_through_kernel(
        &self,
        flow: &FlowShared,
        payload: &[u8],
        failed: SendError,
    ) -> Result<(), SendError> {
        let (from, to) = flow.template.addrs().ok_or(failed)?;
        self.kernel.send(payload, from, to, 0).map_err(|_| failed)?;
        flow.sent.fetch_add(1, Ordering::Relaxed);
        flow.replied();
        Ok(())
    }
}

/// A reply on its way to the tx ring: one frame, or a chain of frames for a
/// reply longer than one (multi-buffer).
enum Outgoing {
    One(Frame),
    Chain(Vec<Frame>),
}

/// Builds the acceptor task of one worker CPU from its listener
/// ([`EngineBuilder::deliver_flows_on_workers`]).
type Acceptor = Arc<dyn Fn(CpuId, FlowListener) -> Pin<Box<dyn Future<Output = ()>>> + Send + Sync>;

/// Flow delivery as the application the engine runs: each worker's handler
/// is a demultiplexer feeding the hub's flows; with an acceptor, the
/// workers also run the flows' tasks.
pub(crate) struct HubHandle {
    hub: Arc<Hub>,
    acceptor: Option<Acceptor>,
}

impl Application for HubHandle {
    fn worker_started(&self, cpu: CpuId) {
        // On the worker's thread, whose executor is installed by now; once
        // per worker, however often its handler is rebuilt.
        if let Some(acceptor) = &self.acceptor {
            match self.hub.listener_of(Some(cpu)) {
                Some(listener) => {
                    if !crate::tasks::spawn_local(acceptor(cpu, listener)) {
                        warn!(
                            cpu,
                            "no task executor on this worker: its flows are not accepted"
                        );
                    }
                }
                None => warn!(cpu, "no listener for this worker's CPU"),
            }
        }
    }

    fn handler(&self, _cpu: CpuId) -> Box<dyn PacketHandler> {
        Box::new(FlowDemux::new(
            Arc::clone(&self.hub),
            self.acceptor.is_some(),
        ))
    }

    fn stop(&self) {
        self.hub.shut();
    }

    fn tasks_on_workers(&self) -> bool {
        self.acceptor.is_some()
    }

    fn flow_stats(&self) -> Option<HubStats> {
        Some(self.hub.stats())
    }
}

/// Flow delivery's settings on the engine's builder.
impl EngineBuilder {
    /// Delivers each UDP flow to the application as a [`Flow`] instead of
    /// running a packet handler; take the listener(s) with
    /// [`Engine::listener`] / [`Engine::listener_for`]. An eighth of the
    /// UMEM frames is kept back for the replies flows send.
    pub fn deliver_flows(mut self, options: FlowOptions) -> Self {
        self.reply_reserve_div = 8;
        self.application(move |parts| HubHandle {
            hub: Arc::new(Hub::new(options, parts, false)),
            acceptor: None,
        })
    }

    /// Flow delivery whose tasks run on the engine's own worker threads
    /// (thread-per-core): each worker owns a tokio current_thread runtime
    /// and runs `acceptor(cpu, listener)` on it, with the listener of the
    /// flows its CPU receives (`options.accept` is ignored: one listener per
    /// worker CPU). Tasks the acceptor spawns with
    /// `tokio::task::spawn_local` run on that worker too, between its
    /// rounds and while it sleeps: a datagram reaches its reader without a
    /// thread hop, and reading records the worker's CPU, so the flow stays
    /// there. Tasks may use tokio's sockets and timers; they must not block
    /// the thread (that stalls the worker's packets). At stop, the tasks see
    /// the end (`recv` and `accept` give `None`) and get a second to finish.
    /// [`Engine::listener`] and [`Engine::listener_for`] give `None`.
    ///
    /// ```no_run
    /// use steer_engine::engine::Engine;
    /// use steer_engine::flows::FlowOptions;
    /// use steer_xdp::Proto;
    /// let engine = Engine::builder("eth1")
    ///     .own(Proto::Udp, 5353)
    ///     .deliver_flows_on_workers(FlowOptions::default(), |_cpu, listener| async move {
    ///         while let Some(mut flow) = listener.accept().await {
    ///             tokio::task::spawn_local(async move {
    ///                 while let Some(datagram) = flow.recv().await {
    ///                     let _ = flow.send(&datagram); // echo
    ///                 }
    ///             });
    ///         }
    ///     })
    ///     .start()?;
    /// let report = engine.stop()?;
    /// assert!(report.census_ok());
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn deliver_flows_on_workers<F, Fut>(mut self, options: FlowOptions, acceptor: F) -> Self
    where
        F: Fn(CpuId, FlowListener) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.reply_reserve_div = 8;
        let options = FlowOptions {
            accept: AcceptMode::PerCpu,
            ..options
        };
        let acceptor: Acceptor = Arc::new(move |cpu, listener| Box::pin(acceptor(cpu, listener)));
        self.application(move |parts| HubHandle {
            hub: Arc::new(Hub::new(options, parts, true)),
            acceptor: Some(acceptor),
        })
    }
}

/// Flow delivery's handles on the running engine.
impl Engine {
    fn hub(&self) -> Option<Arc<Hub>> {
        Some(Arc::clone(&self.application::<HubHandle>()?.hub))
    }

    /// The listener of new flows ([`AcceptMode::Single`] flow delivery;
    /// `None` otherwise, and with the flows' tasks on the workers).
    pub fn listener(&self) -> Option<FlowListener> {
        self.hub()?.listener(None)
    }

    /// The listener of the flows first received on `cpu`
    /// ([`AcceptMode::PerCpu`] flow delivery; `None` otherwise, for a CPU
    /// without a worker, and with the flows' tasks on the workers, whose
    /// acceptors hold the listeners).
    pub fn listener_for(&self, cpu: CpuId) -> Option<FlowListener> {
        self.hub()?.listener(Some(cpu))
    }

    /// Flow-delivery counters (`None` without flow delivery).
    pub fn flow_stats(&self) -> Option<HubStats> {
        Some(self.hub()?.stats())
    }

    /// The limits the flow budget resolved to at start (`None` without
    /// flow delivery): a proxy sizes its own per-flow resources by them.
    pub fn flow_limits(&self) -> Option<FlowLimits> {
        Some(self.hub()?.limits())
    }

    /// Lowers the flow budget to at most `max_flows` open flows, in all
    /// and per worker (a larger value changes nothing): for an application
    /// that found, once running, fewer per-flow resources than the budget
    /// assumed (a proxy's backend sockets). Flows open past it leave as
    /// new ones need room; the XDP gate closes at the new budget. The
    /// limits now (`None` without flow delivery).
    ///
    /// ```no_run
    /// # use steer_engine::engine::Engine;
    /// # use steer_engine::flows::FlowOptions;
    /// # use steer_xdp::Proto;
    /// let engine = Engine::builder("veth0")
    ///     .own(Proto::Udp, 7000)
    ///     .deliver_flows(FlowOptions::default())
    ///     .start()?;
    /// let sockets = 900; // what the application can really hold
    /// let limits = engine.limit_flows(sockets).expect("flow delivery is on");
    /// assert!(limits.max_flows <= sockets);
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn limit_flows(&self, max_flows: usize) -> Option<FlowLimits> {
        Some(self.hub()?.limit_flows(max_flows))
    }
}
