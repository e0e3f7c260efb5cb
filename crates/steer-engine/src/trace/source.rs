//! [`TracedSource`]: an rx queue's [`RxSource`] that also records each
//! received frame's flow (hashed by the same classifier the queue's
//! dispatcher uses, so the trace names flows as steer does) into the
//! [`TraceSink`], one clock read per batch.
//!
//! Invariant: it reads the frames it hands out only while it still owns
//! them (between the inner source's `poll` and its own return), and hands
//! out exactly what the inner source gave.

use std::sync::Arc;

use steer_core::dispatch::FramePool;
use steer_core::flow::Classifier;
use steer_core::runtime::RxSource;

use super::TraceSink;

/// An rx source that records packet arrivals.
pub(crate) struct TracedSource<S, P, C> {
    inner: S,
    pool: P,
    classifier: C,
    rxq: u32,
    sink: Arc<TraceSink>,
}

impl<S, P, C> TracedSource<S, P, C> {
    /// Records what `inner` (rx queue index `rxq`) receives, classifying
    /// frames read through `pool` with `classifier`.
    pub(crate) fn new(inner: S, pool: P, classifier: C, rxq: u32, sink: Arc<TraceSink>) -> Self {
        Self {
            inner,
            pool,
            classifier,
            rxq,
            sink,
        }
    }
}

impl<D, S, P, C> RxSource<D> for TracedSource<S, P, C>
where
    S: RxSource<D>,
    P: FramePool<D> + Send,
    C: Classifier + Send,
{
    fn poll(&mut self, out: &mut [D]) -> usize {
        let n = self.inner.poll(out);
        if n > 0 && self.sink.recording() {
            let t = self.sink.now_ns();
            for d in &out[..n] {
                // Frames without a flow (malformed, not IP) are not steered
                // by flow: nothing to replay.
                if let Ok(Some(info)) = self
                    .classifier
                    .classify(self.pool.frame(d), self.pool.rx_hash(d))
                {
                    if info.hash != 0 {
                        self.sink.packet(t, self.rxq, info.hash);
                    }
                }
            }
        }
        n
    }

    fn give_back(&mut self, descs: &[D]) {
        self.inner.give_back(descs);
    }

    fn has_pending(&self) -> bool {
        self.inner.has_pending()
    }
}
