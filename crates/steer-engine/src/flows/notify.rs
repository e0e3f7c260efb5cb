//! Readiness of flows and listeners for the two ways proxies wait: an async
//! task (an [`AtomicWaker`], runtime-agnostic, so tokio multi-thread and
//! per-core current_thread runtimes both work), or a mio event loop (a
//! [`MioNotifier`]: one mio `Waker` plus a ready list of tokens).
//!
//! Invariant (no lost wake-up): the producer makes data visible, then
//! notifies; a consumer registers, then re-checks before sleeping. For mio,
//! a token is queued at most once until the event loop takes it
//! ([`MioNotifier::drain`] clears its flag before the loop reads the flow),
//! so data that arrives after the flag is cleared queues the token again.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use atomic_waker::AtomicWaker;
use crossbeam_queue::SegQueue;
use mio::{Registry, Token, Waker};

/// Wakes a mio event loop and tells it which flows or listeners are ready.
///
/// ```
/// use std::time::Duration;
/// let mut poll = mio::Poll::new().unwrap();
/// let notifier = steer_engine::flows::MioNotifier::new(poll.registry(), mio::Token(0)).unwrap();
/// // (a flow or listener registered with `notify_mio(&notifier, 7)` does this:)
/// let mut events = mio::Events::with_capacity(8);
/// poll.poll(&mut events, Some(Duration::from_millis(1))).unwrap();
/// assert_eq!(notifier.drain().count(), 0);
/// ```
#[derive(Debug)]
pub struct MioNotifier {
    waker: Waker,
    ready: SegQueue<(usize, Arc<AtomicBool>)>,
}

impl MioNotifier {
    /// A notifier that wakes `registry`'s poll with event `token`.
    pub fn new(registry: &Registry, token: Token) -> io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            waker: Waker::new(registry, token)?,
            ready: SegQueue::new(),
        }))
    }

    /// The tokens that became ready since the last drain, each once.
    pub fn drain(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::from_fn(move || {
            let (token, queued) = self.ready.pop()?;
            queued.store(false, Ordering::SeqCst);
            Some(token)
        })
    }

    fn mark(&self, token: usize, queued: &Arc<AtomicBool>) {
        if !queued.swap(true, Ordering::SeqCst) {
            self.ready.push((token, Arc::clone(queued)));
            // A failed eventfd write leaves the token queued for the next poll.
            let _ = self.waker.wake();
        }
    }
}

/// The consumer side's wake-up: an async task, a mio loop, or both.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    task: AtomicWaker,
    mio: OnceLock<(Arc<MioNotifier>, usize)>,
    queued: Arc<AtomicBool>,
}

impl Readiness {
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.task.register(waker);
    }

    pub(crate) fn set_mio(&self, notifier: &Arc<MioNotifier>, token: usize) -> bool {
        self.mio.set((Arc::clone(notifier), token)).is_ok()
    }

    /// Something became available: wake whoever waits.
    pub(crate) fn notify(&self) {
        self.task.wake();
        if let Some((n, token)) = self.mio.get() {
            n.mark(*token, &self.queued);
        }
    }
}
