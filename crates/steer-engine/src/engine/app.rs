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

/// Where a packet is being handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketContext {
    /// The CPU of the worker running the handler.
    pub cpu: CpuId,
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
/// assert_eq!(c.handle(&mut [0u8; 60], &PacketContext { cpu: 0 }), Verdict::Consume);
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
