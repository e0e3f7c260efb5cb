//! The counters of an rx-queue flow table: moves, held-back moves, hook
//! calls and failures, expiries and hook removals.
//!
//! The owning dispatcher is their only writer (a relaxed load and store per
//! bump, no locked instruction); monitoring threads read them through an
//! [`RxFlowCounters`] handle at any time. They sit on their own padded cache
//! lines, apart from the table's hot buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

/// The live counters; written only by the dispatcher owning the table.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) moves: AtomicU64,
    pub(super) held_back: AtomicU64,
    pub(super) hook_calls: AtomicU64,
    pub(super) hook_errors: AtomicU64,
    pub(super) expired: AtomicU64,
    pub(super) hook_removes: AtomicU64,
}

/// Single-writer increment: the owning dispatcher is the only writer, so a
/// load and a store replace a locked read-modify-write.
#[inline]
pub(super) fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// A snapshot of an rx-queue table's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxFlowStats {
    /// Flows moved to a new CPU (including first placements).
    pub moves: u64,
    /// Moves held back because packets were still queued on the old CPU.
    pub held_back: u64,
    /// Calls to [`SteerHook::steer`](crate::hook::SteerHook::steer).
    pub hook_calls: u64,
    /// Of those, calls that failed.
    pub hook_errors: u64,
    /// Entries expired by the sweep.
    pub expired: u64,
    /// Calls to [`SteerHook::remove`](crate::hook::SteerHook::remove).
    pub hook_removes: u64,
}

/// A shared, read-only view of an rx-queue table's counters for monitoring
/// threads.
#[derive(Debug, Clone)]
pub struct RxFlowCounters(pub(super) Arc<CachePadded<Counters>>);

impl RxFlowCounters {
    /// Zeroed counters on their own cache lines.
    pub(super) fn new() -> Self {
        Self(Arc::new(CachePadded::new(Counters::default())))
    }

    /// A snapshot of the counters.
    pub fn snapshot(&self) -> RxFlowStats {
        let c = &self.0;
        RxFlowStats {
            moves: c.moves.load(Ordering::Relaxed),
            held_back: c.held_back.load(Ordering::Relaxed),
            hook_calls: c.hook_calls.load(Ordering::Relaxed),
            hook_errors: c.hook_errors.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            hook_removes: c.hook_removes.load(Ordering::Relaxed),
        }
    }
}
