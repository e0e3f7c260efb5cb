//! The application's side of the engine: the [`PacketHandler`] each worker
//! runs, what it answers ([`Verdict`]), and the adapter that runs it on UMEM
//! frames and stages replies for the worker's transmit path.
//!
//! Invariant: every frame handed to the adapter ends on the tx path or back
//! in the spare pool, whatever the verdict.

use std::sync::Arc;

use steer_core::cpu::CpuId;
use steer_core::dispatch::Handler;
use xdp_io::{RawFrame, UmemView};

use super::counters::{EngineCounters, WorkerCounts};
use crate::frames::{adopt, TxPath, UmemPool};

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

/// Where a packet is being handled, and the flow hash it was steered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketContext {
    /// The CPU of the worker running the handler.
    pub cpu: CpuId,
    /// The flow hash the dispatcher steered the packet by: the NIC's
    /// receive hash with [`EngineBuilder::use_rx_hash`](super::EngineBuilder::use_rx_hash)
    /// when the packet had a 5-tuple one, else the engine's hasher; 0 for a
    /// packet without a flow (not IP). Consumption recorded for the flow
    /// must use this hash ([`steer_core::record::Recorder`]).
    pub hash: u32,
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
/// assert_eq!(c.handle(&mut [0u8; 60], &PacketContext { cpu: 0, hash: 7 }), Verdict::Consume);
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
}

impl Handler<RawFrame, UmemPool> for WorkerHandler {
    fn handle(&mut self, desc: RawFrame, pool: &mut UmemPool) {
        self.ctx.hash = desc.flow_hash();
        let mut frame = adopt(desc);
        let app = &mut self.app;
        let ctx = &self.ctx;
        let verdict = self
            .umem
            .with_data_mut(&mut frame, |data| app.handle(data, ctx))
            .unwrap_or(Verdict::Drop);
        match verdict {
            Verdict::Transmit(len) => {
                self.umem.set_len(&mut frame, len);
                self.tx.stage(frame);
            }
            Verdict::Consume => {
                self.local.consumed += 1;
                pool.spare.put(frame);
            }
            Verdict::Drop => {
                self.local.app_dropped += 1;
                pool.spare.put(frame);
            }
        }
    }

    fn flush(&mut self, _pool: &mut UmemPool) {
        self.app.flush();
        let sent = self.tx.flush();
        self.local.tx += sent.sent;
        self.local.tx_dropped += sent.dropped;
        self.counters.flush(self.ctx.cpu, &mut self.local);
    }
}

/// An application layer run by the engine's workers: it builds each
/// worker's [`PacketHandler`] and hears when the engine stops. A plain
/// handler ([`EngineBuilder::handler`](super::EngineBuilder::handler)) is
/// one; flow delivery ([`crate::flows`]) is another, built from the
/// [`EngineParts`] the engine hands it before any worker starts.
pub trait Application: Send + Sync + 'static {
    /// The handler of the worker on `cpu`, built on that worker's thread.
    fn handler(&self, cpu: CpuId) -> Box<dyn PacketHandler>;

    /// The engine is stopping; called before the workers stop (default:
    /// nothing). Whatever the application sends must stop here.
    fn stop(&self) {}
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
    pub(crate) tx: crate::frames::TxResources,
    /// Where consumption is recorded for the trace, when recording.
    pub(crate) trace: Option<Arc<crate::trace::TraceSink>>,
}

impl std::fmt::Debug for EngineParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineParts")
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}
