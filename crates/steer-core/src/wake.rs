//! Sleeping and waking idle workers.
//!
//! A worker with nothing to do announces it is going to sleep on its
//! [`Doorbell`], re-checks its rings, and sleeps; a dispatcher that queued
//! packets for it rings the bell, which wakes it only if it announced sleep.
//! The announce/re-check on one side and the queue/check on the other are
//! ordered by `SeqCst`, so a packet queued while the worker falls asleep is
//! never missed (it either sees the packet on re-check or the dispatcher sees
//! the flag). The flag sits on its own cache line: dispatchers read it once
//! per batch per target, and it is written only around sleeps.
//!
//! How a worker sleeps is pluggable ([`Sleeper`]): plain thread parking here;
//! an event loop (mio `Waker`, eventfd) when the worker also waits for socket
//! readiness; an async executor when the worker also runs the application's
//! tasks (it gets a word on idle rounds too: [`Sleeper::idle`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// How a worker thread sleeps and is woken.
pub trait Sleeper: Send + Sync {
    /// Sleep until [`Sleeper::wake`] or `timeout` (spurious wake-ups allowed).
    fn sleep(&self, timeout: Duration);
    /// Wake the sleeper (or make its next sleep return at once).
    fn wake(&self);
    /// The worker found no work this round and does not sleep yet (it
    /// spins before sleeping, or busy-polls): a sleeper that also runs
    /// deferred work (an executor's timers and I/O) may do a bounded,
    /// non-blocking share of it here. Called on every such round, so it
    /// must be cheap when nothing is due. Default: nothing.
    fn idle(&self) {}
    /// Sleep for `d` on a timer alone: nothing wakes the nap early (no
    /// doorbell, no socket readiness), so the CPUs that queue work for this
    /// worker meanwhile pay no wake-up. A sleeper that also runs deferred
    /// work does its share first. Default: [`Sleeper::idle`], then
    /// `std::thread::sleep`.
    fn nap(&self, d: Duration) {
        self.idle();
        std::thread::sleep(d);
    }
}

/// A [`Sleeper`] using `std::thread::park_timeout`; bind it to the worker's
/// thread with [`ThreadSleeper::current`] from that thread.
#[derive(Debug, Clone)]
pub struct ThreadSleeper(std::thread::Thread);

impl ThreadSleeper {
    /// A sleeper for the calling thread.
    pub fn current() -> Self {
        Self(std::thread::current())
    }
}

impl Sleeper for ThreadSleeper {
    fn sleep(&self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }

    fn wake(&self) {
        self.0.unpark();
    }
}

/// One worker's wake-up bell.
///
/// ```
/// use std::time::Duration;
/// use steer_core::wake::{Doorbell, ThreadSleeper};
/// let bell = Doorbell::new(ThreadSleeper::current());
/// assert!(!bell.ring()); // nobody asleep: nothing to do
/// // The worker's side: announce, re-check the rings, then sleep.
/// bell.sleep_unless(|| true, Duration::from_millis(1)); // work found: no sleep
/// ```
pub struct Doorbell {
    sleeping: CachePadded<AtomicBool>,
    sleeper: Box<dyn Sleeper>,
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell")
            .field("sleeping", &self.sleeping.load(Ordering::Relaxed))
            .finish()
    }
}

impl Doorbell {
    /// A bell waking through `sleeper`.
    pub fn new(sleeper: impl Sleeper + 'static) -> Arc<Self> {
        Arc::new(Self {
            sleeping: CachePadded::new(AtomicBool::new(false)),
            sleeper: Box::new(sleeper),
        })
    }

    /// Dispatcher side, after queuing: wakes the worker if it is asleep or
    /// falling asleep. Returns whether it woke it.
    #[inline]
    #[doc(alias("net_rps_send_ipi", "rps_trigger_softirq"))]
    pub fn ring(&self) -> bool {
        if self.sleeping.load(Ordering::SeqCst) {
            self.sleeper.wake();
            true
        } else {
            false
        }
    }

    /// Worker side: announces sleep, runs `has_work` (which must re-check
    /// every input), and sleeps up to `timeout` unless it found work.
    /// Returns whether it slept.
    pub fn sleep_unless(&self, has_work: impl FnOnce() -> bool, timeout: Duration) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        let slept = if has_work() {
            false
        } else {
            self.sleeper.sleep(timeout);
            true
        };
        self.sleeping.store(false, Ordering::SeqCst);
        slept
    }

    /// Worker side, on a round without work that does not sleep: passes it
    /// on to [`Sleeper::idle`].
    #[inline]
    pub fn idle(&self) {
        self.sleeper.idle();
    }

    /// Worker side: naps `d` on a timer without announcing sleep (rings
    /// meanwhile wake nobody; the worker finds their work when the nap
    /// ends). See [`Sleeper::nap`].
    pub fn nap(&self, d: Duration) {
        self.sleeper.nap(d);
    }

    /// Whether the worker is (about to be) asleep.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_sleeping_worker_quickly() {
        let work = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let w = work.clone();
        let worker = std::thread::spawn(move || {
            let bell = Doorbell::new(ThreadSleeper::current());
            tx.send(bell.clone()).unwrap();
            let start = Instant::now();
            while w.load(Ordering::SeqCst) == 0 {
                bell.sleep_unless(|| w.load(Ordering::SeqCst) > 0, Duration::from_secs(10));
            }
            start.elapsed()
        });
        let bell = rx.recv().unwrap();
        while !bell.is_sleeping() {
            std::thread::yield_now();
        }
        work.store(1, Ordering::SeqCst);
        bell.ring();
        // Woken by the bell, not by the 10 s timeout.
        assert!(worker.join().unwrap() < Duration::from_secs(5));
    }
}
