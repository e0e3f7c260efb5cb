//! The application's side of the engine: the [`PacketHandler`] each worker
//! runs, what it answers ([`Verdict`]), where it runs and how it steers its
//! flows ([`PacketContext`]), and the adapter that runs it on UMEM frames
//! and stages replies for the worker's transmit path.
//!
//! Invariants: every frame handed to the adapter ends on the tx path or back
//! in the spare pool, whatever the verdict, also when the handler panics
//! (the frame is returned and counted in `app_panicked` on the way out).
//! Replies leave in the order they were staged, and a ring's head passes a
//! packet only after the flush that sent its reply (steer-core's runtime
//! publishes heads after [`Handler::flush`]), so a flow the handler moves
//! ([`PacketContext::record_on`], [`PacketContext::pin_to`]) never has a
//! later reply sent before an earlier one.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use steer_core::cpu::CpuId;
use steer_core::dispatch::Handler;
use steer_xdp::frames::{RawFrame, TxPath, TxResources, UmemPool};
use steer_xdp::{Frame, UmemView};

use super::counters::{EngineCounters, WorkerCounts};
use super::slow_path::{Datagram, Event, SlowWorker};
use super::steering::{FlowSteerError, FlowSteering};
use steer_core::flow::{FlowHasher, KeyedHasher};
use steer_core::policy::RecordOutcome;

/// What to do with a handled packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the first `len` bytes of the (rewritten) frame from this
    /// worker's socket. `len` is capped at the frame's room.
    Transmit(usize),
    /// Done with it, no reply (counted as consumed).
    Consume,
    /// Refuse it (counted as dropped by the application).
    Drop,
}

/// Where a packet is being handled, and the handler's say in where its flow
/// goes next: a run-to-completion handler knows which CPU should serve a
/// flow, and records it (through the update rule, as flow delivery records
/// the reading thread's CPU) or pins it there. The dispatchers move the
/// flow only once its earlier packets are handled and answered, so its
/// replies stay in order. Not using it costs nothing per packet.
///
/// ```
/// use steer_engine::engine::{PacketContext, Verdict};
/// use steer_core::packet::build::FrameBuilder;
///
/// let mut frame = FrameBuilder::udp([10, 0, 0, 2].into(), [10, 0, 0, 1].into(), 4000, 53).build();
/// let handler = |packet: &mut [u8], ctx: &PacketContext| {
///     // Before rewriting the packet: the hash steer steers its flow by.
///     if let Some(hash) = ctx.flow_hash(packet) {
///         let _ = ctx.record_on(hash, 1); // its state lives on CPU 1
///     }
///     Verdict::Consume
/// };
/// // Outside an engine the context steers nothing, and says so.
/// let ctx = PacketContext::detached(0);
/// assert_eq!(handler(&mut frame, &ctx), Verdict::Consume);
/// assert!(ctx.flow_hash(&frame).is_some());
/// assert!(ctx.record(1).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct PacketContext {
    /// The CPU of the worker running the handler.
    pub cpu: CpuId,
    /// The flow hash the dispatcher tagged the packet with (0: none).
    hash: u32,
    /// The datagram came through the slow path (reassembled by the kernel).
    from_kernel: bool,
    steering: Option<Arc<FlowSteering>>,
}

impl PacketContext {
    /// A context outside any engine (tests, benches): it knows its CPU and
    /// hashes flows with a fixed key; recording and pinning answer
    /// [`FlowSteerError::Detached`].
    pub fn detached(cpu: CpuId) -> Self {
        Self {
            cpu,
            hash: 0,
            from_kernel: false,
            steering: None,
        }
    }

    pub(crate) fn new(cpu: CpuId, steering: Arc<FlowSteering>) -> Self {
        Self {
            cpu,
            hash: 0,
            from_kernel: false,
            steering: Some(steering),
        }
    }

    /// The flow hash the dispatcher steered this packet by: the NIC's
    /// receive hash with [`EngineBuilder::use_rx_hash`](super::EngineBuilder::use_rx_hash)
    /// when the packet had a 5-tuple one, else the engine's hasher; 0 for a
    /// packet without a flow (not IP), and outside an engine. Consumption
    /// recorded for the flow must use this hash.
    pub fn hash(&self) -> u32 {
        self.hash
    }

    /// Whether the packet is a datagram the kernel reassembled from
    /// fragments, handed over by the engine's slow path rather than
    /// received on an AF_XDP socket: its Ethernet addresses are zeros (the
    /// frame was written for the handler), and a reply the handler asks
    /// to transmit leaves through the kernel's UDP socket on the owned
    /// port, which fragments it. A handler that keeps the frame's headers
    /// for later replies must not send those through AF_XDP.
    pub fn from_kernel(&self) -> bool {
        self.from_kernel
    }

    fn steering(&self) -> Result<&FlowSteering, FlowSteerError> {
        self.steering.as_deref().ok_or(FlowSteerError::Detached)
    }

    /// The hash the dispatchers steer `packet`'s flow by, `None` for a frame
    /// without a flow. For the packet being handled this is the hash the
    /// dispatcher steered it by ([`PacketContext::hash`]: the NIC's receive
    /// hash with [`EngineBuilder::use_rx_hash`](super::EngineBuilder::use_rx_hash));
    /// outside an engine, its 5-tuple under a fixed-key hasher. Ask before
    /// rewriting the packet into a reply when outside an engine: the
    /// reply's 5-tuple is another flow's.
    pub fn flow_hash(&self, packet: &[u8]) -> Option<u32> {
        if self.hash != 0 {
            return Some(self.hash);
        }
        match &self.steering {
            Some(s) => s.flow_hash(packet),
            None => {
                let key = steer_core::flow::flow_key(packet).ok()??;
                Some(KeyedHasher::with_seed(0).hash(&key))
            }
        }
    }

    /// Flow `hash` is consumed on this worker's CPU ([`PacketContext::cpu`]):
    /// [`PacketContext::record_on`] it.
    #[doc(alias("rps_record_sock_flow", "sock_rps_record_flow"))]
    pub fn record(&self, hash: u32) -> Result<RecordOutcome, FlowSteerError> {
        self.record_on(hash, self.cpu)
    }

    /// Flow `hash` is consumed on worker CPU `cpu`: recorded in the
    /// desired-CPU table under the engine's update policy (`llc` keeps a
    /// flow whose new CPU shares the old one's cache, and says
    /// [`RecordOutcome::Suppressed`]), so the dispatchers steer its next
    /// packets there once its earlier ones are handled and answered.
    pub fn record_on(&self, hash: u32, cpu: CpuId) -> Result<RecordOutcome, FlowSteerError> {
        self.steering()?.record_on(hash, cpu)
    }

    /// Runs flow `hash` on worker CPU `cpu` from now on, whatever is
    /// recorded (explicit affinity, like flow delivery's `Flow::pin_to`).
    /// A pin rewrites the engine's shared pin set: for occasional changes,
    /// not for every packet.
    pub fn pin_to(&self, hash: u32, cpu: CpuId) -> Result<(), FlowSteerError> {
        self.steering()?.pin(hash, cpu)
    }

    /// Removes a [`PacketContext::pin_to`]: flow `hash` follows its records
    /// again.
    pub fn unpin(&self, hash: u32) -> Result<(), FlowSteerError> {
        self.steering()?.unpin(hash);
        Ok(())
    }
}

/// The application's packet handler; one instance per worker, built on the
/// worker's pinned thread.
///
/// ```
/// use steer_engine::engine::{PacketContext, PacketHandler, Verdict};
/// struct Counter(u64);
/// impl PacketHandler for Counter {
///     fn handle(&mut self, packet: &mut [u8], _ctx: &PacketContext) -> Verdict {
///         self.0 += packet.len() as u64;
///         Verdict::Consume
///     }
/// }
/// let mut c = Counter(0);
/// assert_eq!(c.handle(&mut [0u8; 60], &PacketContext::detached(0)), Verdict::Consume);
/// ```
pub trait PacketHandler: Send {
    /// Handles one frame (Ethernet header first), which may be rewritten in
    /// place into a reply.
    fn handle(&mut self, packet: &mut [u8], ctx: &PacketContext) -> Verdict;

    /// The end of a batch (wake readers, flush buffers); default: nothing.
    fn flush(&mut self) {}
}

impl<F: FnMut(&mut [u8], &PacketContext) -> Verdict + Send> PacketHandler for F {
    fn handle(&mut self, packet: &mut [u8], ctx: &PacketContext) -> Verdict {
        self(packet, ctx)
    }
}

/// Builds a worker's handler for its CPU.
pub type HandlerFactory = Arc<dyn Fn(CpuId) -> Box<dyn PacketHandler> + Send + Sync>;

/// The runtime's handler on one worker: the application's handler on UMEM
/// frames, replies staged on the worker's [`TxPath`].
pub(crate) struct WorkerHandler {
    pub(crate) app: Box<dyn PacketHandler>,
    pub(crate) ctx: PacketContext,
    pub(crate) umem: UmemView,
    pub(crate) tx: TxPath,
    pub(crate) counters: Arc<EngineCounters>,
    pub(crate) local: WorkerCounts,
    /// The worker's side of the slow path (reassembled datagrams from the
    /// kernel sockets), if any socket is bound.
    pub(crate) slow: Option<SlowWorker>,
    /// Datagrams taken from the slow path this round.
    pub(crate) slow_batch: Vec<Datagram>,
}

impl WorkerHandler {
    /// A frame the application answered no reply for: counted as consumed
    /// or dropped, and back to the spare pool.
    fn give_back(&mut self, verdict: Verdict, frame: Frame, pool: &mut UmemPool) {
        if matches!(verdict, Verdict::Consume) {
            self.local.consumed += 1;
        } else {
            self.local.app_dropped += 1;
        }
        pool.spare().put(frame);
    }

    /// A packet received in several frames: the handler runs on its
    /// contiguous copy, and a reply is written back across `frame` and
    /// spare frames (a multi-buffer reply) when it does not fit one.
    fn handle_multi(&mut self, frame: Frame, mut gathered: Box<[u8]>, pool: &mut UmemPool) {
        let app = &mut self.app;
        let ctx = &self.ctx;
        let verdict = match catch_unwind(AssertUnwindSafe(|| app.handle(&mut gathered, ctx))) {
            Ok(v) => v,
            Err(panic) => {
                self.local.app_panicked += 1;
                pool.spare().put(frame);
                resume_unwind(panic);
            }
        };
        match verdict {
            Verdict::Transmit(len) => {
                let reply = &gathered[..len.min(gathered.len())];
                if !self.tx.stage_packet(&self.umem, frame, reply) {
                    self.local.tx_dropped += 1;
                }
            }
            kept @ (Verdict::Consume | Verdict::Drop) => self.give_back(kept, frame, pool),
        }
    }
}

impl Handler<RawFrame, UmemPool> for WorkerHandler {
    fn handle(&mut self, desc: RawFrame, pool: &mut UmemPool) {
        self.ctx.hash = desc.flow_hash();
        // The runtime hands each descriptor over once: adoption is refused
        // only to a copy, which names no frame of ours (nothing to do).
        let Some(packet) = pool.adopt_packet(desc) else {
            return;
        };
        let mut frame = packet.frame;
        if let Some(gathered) = packet.gathered {
            return self.handle_multi(frame, gathered, pool);
        }
        let app = &mut self.app;
        let ctx = &self.ctx;
        let verdict = self.umem.with_data_mut(&mut frame, |data| {
            catch_unwind(AssertUnwindSafe(|| app.handle(data, ctx)))
        });
        let verdict = match verdict {
            Some(Ok(v)) => v,
            None => Verdict::Drop,
            Some(Err(panic)) => {
                // The frame goes back before the worker dies; the runtime
                // then routes around this worker.
                self.local.app_panicked += 1;
                pool.spare().put(frame);
                resume_unwind(panic);
            }
        };
        match verdict {
            Verdict::Transmit(len) => {
                self.umem.set_len(&mut frame, len);
                self.tx.stage(frame);
            }
            kept @ (Verdict::Consume | Verdict::Drop) => self.give_back(kept, frame, pool),
        }
    }

    /// Runs the handler on the slow path's datagrams waiting for this
    /// worker (a few per round); replies go out through the kernel socket.
    fn poll_side(&mut self, _pool: &mut UmemPool) -> usize {
        let Some(slow) = &self.slow else {
            return 0;
        };
        slow.take(&mut self.slow_batch);
        let n = self.slow_batch.len();
        self.ctx.from_kernel = true;
        for mut d in self.slow_batch.drain(..) {
            self.ctx.hash = d.hash;
            let app = &mut self.app;
            let ctx = &self.ctx;
            let verdict = match catch_unwind(AssertUnwindSafe(|| app.handle(&mut d.frame, ctx))) {
                Ok(v) => v,
                Err(panic) => {
                    self.local.app_panicked += 1;
                    self.ctx.from_kernel = false;
                    resume_unwind(panic);
                }
            };
            match verdict {
                Verdict::Transmit(len) => slow.reply(&d.frame[..len.min(d.frame.len())], d.ifindex),
                Verdict::Consume => slow.count(Event::Consumed),
                Verdict::Drop => slow.count(Event::Refused),
            }
        }
        self.ctx.from_kernel = false;
        n
    }

    fn side_pending(&self) -> bool {
        self.slow.as_ref().is_some_and(SlowWorker::is_pending)
    }

    fn flush(&mut self, _pool: &mut UmemPool) {
        self.app.flush();
        let sent = self.tx.flush();
        self.local.tx += sent.sent;
        self.local.tx_dropped += sent.dropped;
        self.counters.flush(self.ctx.cpu, &mut self.local);
    }

    /// From the socket's transmit counters when it is bound zero-copy (the
    /// runtime then holds ring heads until the replies completed); `None`
    /// in copy mode.
    fn tx_progress(&mut self, _pool: &mut UmemPool) -> Option<steer_core::dispatch::TxProgress> {
        self.tx.progress()
    }
}

/// An application layer run by the engine's workers: it builds each
/// worker's [`PacketHandler`] and hears when the engine stops. A plain
/// handler ([`EngineBuilder::handler`](super::EngineBuilder::handler)) is
/// one; flow delivery ([`crate::flows`]) is another, built from the
/// [`EngineParts`] the engine hands it before any worker starts.
pub trait Application: Send + Sync + 'static {
    /// The handler of the worker on `cpu`, built on that worker's thread
    /// when it starts, and again each time the worker is restarted after
    /// its handler panicked
    /// ([`EngineBuilder::worker_restarts`](super::EngineBuilder::worker_restarts)):
    /// start once-per-worker work in [`Application::worker_started`].
    fn handler(&self, cpu: CpuId) -> Box<dyn PacketHandler>;

    /// The worker thread of `cpu` has started, with its task executor
    /// installed when [`Application::tasks_on_workers`]: called once per
    /// worker, before its first handler (default: nothing). Tasks spawned
    /// here run as long as the worker, across restarts of its handler.
    fn worker_started(&self, _cpu: CpuId) {}

    /// The engine is stopping; called before the workers stop (default:
    /// nothing). Whatever the application sends must stop here.
    fn stop(&self) {}

    /// Flow-delivery counters, for the stats socket and metrics (default:
    /// none: the application delivers no flows).
    fn flow_stats(&self) -> Option<crate::observe::HubStats> {
        None
    }

    /// Whether each worker thread also runs the application's async tasks
    /// (default: no). If so, each worker owns a tokio current_thread
    /// runtime with a `LocalSet`: it sleeps in that runtime's event loop
    /// (which also waits for its AF_XDP sockets and doorbell), and its
    /// handler runs the ready tasks at the end of each round with work
    /// (flow delivery on the workers:
    /// [`EngineBuilder::deliver_flows_on_workers`](super::EngineBuilder::deliver_flows_on_workers)).
    fn tasks_on_workers(&self) -> bool {
        false
    }
}

/// A [`HandlerFactory`] as an [`Application`].
pub(crate) struct FactoryApp(pub(crate) HandlerFactory);

impl Application for FactoryApp {
    fn handler(&self, cpu: CpuId) -> Box<dyn PacketHandler> {
        (self.0)(cpu)
    }
}

/// What the engine hands an application layer at start, after the port is
/// open and the shared tables exist and before any worker runs.
pub struct EngineParts {
    /// The desired-CPU table, layout, stats, pins and switches the
    /// dispatchers use; record consumption and pin flows through it.
    pub shared: steer_core::dispatch::Shared,
    /// The worker CPUs, in order.
    pub cpus: Vec<CpuId>,
    /// The hasher the dispatchers classify with, so flows recorded by the
    /// application hash alike.
    pub hasher: steer_core::flow::AnyHasher,
    /// Where replies the application sends from its own threads go.
    pub(crate) tx: TxResources,
    /// Where consumption is recorded for the trace, when recording.
    pub(crate) trace: Option<Arc<crate::trace::TraceSink>>,
    /// Replies through the kernel's UDP sockets on the owned ports (the
    /// slow path's), for what AF_XDP cannot carry.
    pub(crate) kernel: super::slow_path::KernelSender,
    /// The interface's MTU at start (0: unknown): a reply whose IP
    /// datagram is longer leaves through `kernel`, which fragments it.
    pub(crate) mtu: u32,
    /// The XDP program's new-flow gate (none when it could not be made).
    pub(crate) gate: Option<Arc<steer_xdp::AdmissionGate>>,
}

impl std::fmt::Debug for EngineParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineParts")
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}
