//! The dispatcher: for each batch of frames from one rx queue, find each
//! packet's flow and the CPU that should process it, and either run it inline
//! (same-CPU fast path) or hand its descriptor to that CPU's ring.
//!
//! Per packet (`get_rps_cpu` plus `enqueue_to_backlog`, in userspace):
//! 1. classify: flow hash and destination port ([`Classifier`], from
//!    [`crate::flow`]), the descriptor tagged with that hash for the
//!    handler ([`FramePool::tag_flow`]); a malformed frame is counted and
//!    returned to its pool; a frame with no flow (non-IP) is processed on
//!    this CPU, like the kernel does without a hash;
//! 2. desired CPU: an explicit pin ([`Pins`]) if any, else what the consumer
//!    recorded in the [`DesiredCpuTable`](crate::table::DesiredCpuTable),
//!    else, when the load balancer is on, its assignment of the flow's
//!    bucket ([`BucketLoads`](crate::balance::BucketLoads), which also
//!    counts the packets of such unclaimed flows), else plain RPS (the flow
//!    hash scaled over the configured CPUs);
//! 3. the rx-queue table ([`RxFlowTable`](crate::table::RxFlowTable)) moves
//!    the flow there only when its old CPU is gone or has processed the
//!    flow's last queued packet (`last_qtail`), calling the steering hook on
//!    a move;
//! 4. **fast path**: the CPU is this dispatcher's own and no earlier packet of
//!    the flow is still in this CPU's ring: run the handler inline (seed 003,
//!    with its review's ordering fix); otherwise push the descriptor to the
//!    target's ring. A full ring drops the packet, counts it and returns the
//!    frame to its pool; the per-CPU flow limit may drop an elephant flow's
//!    packets when the target ring is more than half full.
//!
//! Invariants: packets of one flow are handled in arrival order (a flow is
//! never inline while earlier packets of it sit in this CPU's ring, and never
//! moves while they sit in another's), and their replies leave in that order
//! when the [`Handler`] sends at [`Handler::flush`]: a ring's head counts a
//! packet only once the worker flushed after it (the runtime's rule), and a
//! flow leaving this CPU after packets ran inline in the batch gets a
//! `flush` before its next packet is queued elsewhere (and, when the handler
//! reports [`Handler::tx_progress`], a bounded wait until those replies
//! completed: zero-copy mode, where flushed is not yet on the wire); every
//! frame handed to
//! [`Dispatcher::dispatch`] ends in exactly one of: the handler, a ring, or
//! the pool (counted as `dropped`, `flow_limit_drops`, `malformed` or
//! `worker_gone_drops`).
//!
//! Where things are: the [`Dispatcher`] itself (`dispatcher.rs`); what the
//! dispatchers share with the rest of the engine, [`Shared`] and its
//! [`DispatchSwitches`] (`shared.rs`); explicit [`Pins`]; the per-CPU
//! [`FlowLimit`]. The interfaces a dispatcher works through are here:
//! [`FramePool`] (where frames live) and [`Handler`] (the user's code), with
//! the [`Classifier`] from [`crate::flow`].

mod dispatcher;
pub mod flow_limit;
mod pins;
mod shared;

pub use dispatcher::Dispatcher;
pub use flow_limit::FlowLimit;
pub use pins::{PinReader, Pins};
pub use shared::{DispatchSwitches, Shared};
// Where they lived before; the classifier is `flow`'s (a lower module).
pub use crate::flow::{Classifier, FlowInfo, Malformed};

/// How many frames ahead of the one being dispatched the dispatcher asks
/// the pool to [`FramePool::prefetch`]: enough to cover a cache miss with
/// the work on the frames in between, few enough to stay within the CPU's
/// outstanding-miss buffers (10 to 12 on current x86 cores).
pub const PREFETCH_AHEAD: usize = 4;

/// Where frames live and go back to: the UMEM on the AF_XDP path, a vector
/// of buffers in tests and benches.
pub trait FramePool<D> {
    /// The bytes of the frame `desc` refers to.
    fn frame(&self, desc: &D) -> &[u8];
    /// The receive hash the NIC computed for it, if any.
    fn rx_hash(&self, _desc: &D) -> Option<u32> {
        None
    }
    /// Takes a frame back (dropped or done with).
    fn release(&mut self, desc: D);
    /// Tags `desc` with the flow hash the dispatcher steers it by (the
    /// NIC's receive hash or the classifier's own), so whoever handles it
    /// knows the hash its flow is steered under: consumption recorded under
    /// any other hash would never be found. Called once per packet that has
    /// a flow, before the handler or a ring gets it. The default does
    /// nothing.
    #[inline]
    fn tag_flow(&self, _desc: &mut D, _hash: u32) {}
    /// A hint that the dispatcher will read the start of `desc`'s frame
    /// soon: a pool whose frames were written by another CPU (the kernel
    /// copying into a UMEM) can start the cache miss now, so the misses of
    /// a batch overlap instead of stalling one after the other. Reads
    /// nothing; the default does nothing.
    #[inline]
    fn prefetch(&self, _desc: &D) {}
}

/// The user's packet handler: owns `desc` and must release it to `pool`
/// (or transmit it) when done.
pub trait Handler<D, P> {
    /// Processes one packet.
    fn handle(&mut self, desc: D, pool: &mut P);
    /// End of a batch (the `xdp_do_flush` point): transmit what was staged.
    /// The runtime calls it once per round with work (after dispatching its
    /// rx batches and draining its rings, before publishing the rings'
    /// heads) and before a worker stops; a [`Dispatcher`] also calls it
    /// mid-batch before a flow that ran inline moves off its CPU. Whatever
    /// `handle` staged must be sent (or dropped) when this returns, in
    /// staging order. The default does nothing.
    #[doc(alias = "xdp_do_flush")]
    fn flush(&mut self, _pool: &mut P) {}
    /// Transmit progress in zero-copy mode, where a flushed reply is only
    /// *queued* to the device and two tx queues leave in no fixed order:
    /// how many frames [`Handler::flush`] has handed to tx so far, and how
    /// many of those the device has completed (the AF_XDP completion ring).
    /// The runtime then publishes a ring's head past a packet only once the
    /// replies flushed for it are completed, and a dispatcher moving a flow
    /// that ran inline off its CPU waits (boundedly) for completion first,
    /// so a flow's replies reach the wire in order across a move.
    ///
    /// `None` (the default) means "sent when flushed" (copy mode: the kick
    /// copies each frame to the device): heads are published right after
    /// the flush, at today's cost. The runtime calls this after every flush
    /// and, while heads are held, once per round: it must not block, and
    /// may reap completions (release completed frames to `pool`, kick the
    /// device). Contract for `Some`: both counts only grow, `completed <=
    /// flushed`, every frame staged before a `flush` returned is counted in
    /// `flushed` when this is next called, and the device completes this
    /// handler's frames in the order they were flushed (one tx queue), so
    /// `completed >= n` means the first `n` flushed frames left.
    fn tx_progress(&mut self, _pool: &mut P) -> Option<TxProgress> {
        None
    }
    /// Work that reaches the worker outside its rx queues and rings (the
    /// engine's slow path: datagrams the kernel reassembled): the runtime
    /// calls it once per round, on the worker's thread, and counts what it
    /// returns as work done (a round with work is flushed). It must not
    /// block. The default has none.
    fn poll_side(&mut self, _pool: &mut P) -> usize {
        0
    }
    /// Whether [`Handler::poll_side`] has work waiting: checked by a worker
    /// about to sleep, after it announced the sleep (whoever queues side
    /// work rings the worker's doorbell after queuing it). The default has
    /// none.
    fn side_pending(&self) -> bool {
        false
    }
}

/// A handler's transmit counters ([`Handler::tx_progress`]): frames handed
/// to tx by its flushes so far, and frames the device completed so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxProgress {
    /// Frames handed to the tx ring by [`Handler::flush`] so far.
    pub flushed: u64,
    /// Frames the device reported completed so far (`<= flushed`).
    pub completed: u64,
}

impl TxProgress {
    /// Whether every frame flushed so far has completed.
    #[inline]
    pub fn settled(&self) -> bool {
        self.completed >= self.flushed
    }
}

/// How long a wait for the device to complete what was flushed may last
/// ([`wait_completed`]): far above one completion round trip (microseconds,
/// a full tx ring at 10 Gb/s is a few milliseconds), so it only ends a
/// wait on a stalled device, where order cannot be kept anyway.
pub const COMPLETION_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// Polls `handler`'s [`Handler::tx_progress`] until every frame it flushed
/// so far has completed (true), it reports none (true: copy mode), or
/// `bound` has passed (false). Progress is polled before the clock, so a
/// thread descheduled past the bound still sees completions that came.
pub fn wait_completed<D, P, H>(handler: &mut H, pool: &mut P, bound: std::time::Duration) -> bool
where
    H: Handler<D, P> + ?Sized,
{
    let Some(first) = handler.tx_progress(pool) else {
        return true;
    };
    if first.settled() {
        return true;
    }
    let deadline = std::time::Instant::now() + bound;
    loop {
        match handler.tx_progress(pool) {
            None => return true,
            Some(p) if p.settled() => return true,
            Some(_) => {}
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::hint::spin_loop();
    }
}

impl<D, P, F: FnMut(D, &mut P)> Handler<D, P> for F {
    #[inline]
    fn handle(&mut self, desc: D, pool: &mut P) {
        self(desc, pool)
    }
}
