//! What the application plugs into a [`Runtime`](super::Runtime): its rx
//! queues ([`RxSource`]) and its per-CPU parts ([`Setup`]: classifier,
//! steering hook, frame pool, packet handler, sleeper), built on each
//! worker's own thread after pinning.

use crate::cpu::CpuId;
use crate::dispatch::{FramePool, Handler};
use crate::flow::Classifier;
use crate::hook::SteerHook;
use crate::wake::{Sleeper, ThreadSleeper};

/// Frames arriving on one rx queue (an AF_XDP socket, a generator).
pub trait RxSource<D>: Send {
    /// Writes up to `out.len()` received descriptors to `out`; returns how many.
    fn poll(&mut self, out: &mut [D]) -> usize;
    /// Gives back descriptors this source handed out that will never be
    /// dispatched (shutdown, or a worker that died mid-batch, which counts
    /// them in `worker_gone_drops`): the source returns them to its pool,
    /// or queues them again to be received anew.
    fn give_back(&mut self, descs: &[D]);
    /// Whether frames are waiting (checked before an idle worker sleeps;
    /// `false` when unknown, then the worker wakes on its sleep timeout or
    /// through a [`Sleeper`] that watches the source).
    fn has_pending(&self) -> bool {
        false
    }
}

/// What the application plugs into a [`Runtime`](super::Runtime): per-CPU parts built on
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
    /// The handler of the worker on `cpu`: called when the worker starts,
    /// and again each time it is restarted after a panic.
    fn handler(&self, cpu: CpuId) -> Self::Handler;
    /// The worker thread of `cpu` is ending (stopped, or given up after a
    /// panic): per-thread state built in [`Setup::sleeper`] or
    /// [`Setup::prepare_thread`] ends here, not when a handler is dropped
    /// (a worker restarted after a panic drops its handler and builds a new
    /// one on the same thread). Default: nothing.
    fn finish_thread(&self, _cpu: CpuId) {}
    /// How the worker on `cpu` sleeps (default: thread parking).
    fn sleeper(&self, _cpu: CpuId) -> Box<dyn Sleeper> {
        Box::new(ThreadSleeper::current())
    }
}
