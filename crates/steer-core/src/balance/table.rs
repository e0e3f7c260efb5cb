//! What the dispatchers and the balancer share: per rx queue, each flow-table
//! bucket's packet count and CPU (written by the queue's dispatcher) and the
//! balancer's assignment (written by the balancer); for the engine, the
//! run-time switch and the balancer's counters.
//!
//! Invariants:
//! - a bucket's count and CPU are written only by the dispatcher of its rx
//!   queue, in one 64-bit word (a relaxed load and store per packet, no
//!   locked instruction); readers see a count that only grows (modulo
//!   2^48) and the CPU of its last packet;
//! - an assignment is only a wish: the dispatcher honours it for flows
//!   with no pin and no recorded CPU, when its CPU is usable, and moves the
//!   flow through the rx-queue table's `last_qtail` rule;
//! - counters sit on their own cache line, apart from the per-bucket words.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

use super::MoveReason;
use crate::cpu::CpuId;

const NO_CPU: u16 = u16::MAX;
const COUNT_BITS: u32 = 48;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// One rx queue's per-bucket packet counts, CPUs and assignments.
///
/// ```
/// use steer_core::balance::BucketLoads;
/// let loads = BucketLoads::new(0, 8);
/// loads.note(3, 1);
/// loads.note(3, 1);
/// assert_eq!(loads.seen(3), (2, Some(1)));
/// loads.assign(3, 0);
/// assert_eq!(loads.assigned(3), Some(0));
/// loads.clear(3);
/// assert_eq!(loads.assigned(3), None);
/// ```
#[derive(Debug)]
pub struct BucketLoads {
    rxq: u32,
    mask: usize,
    /// `cpu << 48 | packets`, per bucket; the dispatcher's.
    seen: Box<[AtomicU64]>,
    /// The balancer's choice per bucket, or `NO_CPU`.
    assign: Box<[AtomicU16]>,
}

impl BucketLoads {
    /// Counters for rx queue `rxq`'s table of `entries` buckets (a power of
    /// two; another size is rounded up to one).
    pub fn new(rxq: u32, entries: usize) -> Self {
        let entries = entries.max(1).next_power_of_two();
        Self {
            rxq,
            mask: entries - 1,
            seen: (0..entries)
                .map(|_| AtomicU64::new(u64::from(NO_CPU) << COUNT_BITS))
                .collect(),
            assign: (0..entries).map(|_| AtomicU16::new(NO_CPU)).collect(),
        }
    }

    /// The rx queue.
    pub fn rxq(&self) -> u32 {
        self.rxq
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.mask + 1
    }

    /// Always false: there is at least one bucket.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The dispatcher queued or ran a packet of a movable flow of `bucket`
    /// on `cpu`. Single writer: only the rx queue's dispatcher calls it.
    #[inline]
    pub fn note(&self, bucket: usize, cpu: CpuId) {
        if let Some(w) = self.seen.get(bucket & self.mask) {
            let v = w.load(Ordering::Relaxed);
            let cpu = u64::from(u16::try_from(cpu).unwrap_or(NO_CPU));
            w.store(
                (cpu << COUNT_BITS) | (v.wrapping_add(1) & COUNT_MASK),
                Ordering::Relaxed,
            );
        }
    }

    /// `bucket`'s packet count so far (modulo 2^48) and the CPU of its last
    /// packet.
    #[inline]
    pub fn seen(&self, bucket: usize) -> (u64, Option<CpuId>) {
        let v = self
            .seen
            .get(bucket & self.mask)
            .map_or(u64::from(NO_CPU) << COUNT_BITS, |w| {
                w.load(Ordering::Relaxed)
            });
        let cpu = (v >> COUNT_BITS) as u16;
        (v & COUNT_MASK, (cpu != NO_CPU).then_some(usize::from(cpu)))
    }

    /// Packets between two counts read with [`BucketLoads::seen`].
    #[inline]
    pub fn delta(now: u64, before: u64) -> u64 {
        now.wrapping_sub(before) & COUNT_MASK
    }

    /// The balancer's CPU for `bucket`, if any.
    #[inline]
    pub fn assigned(&self, bucket: usize) -> Option<CpuId> {
        let c = self
            .assign
            .get(bucket & self.mask)
            .map_or(NO_CPU, |a| a.load(Ordering::Relaxed));
        (c != NO_CPU).then_some(usize::from(c))
    }

    /// Assigns `bucket` to `cpu` (ids that do not fit 16 bits are ignored).
    pub fn assign(&self, bucket: usize, cpu: CpuId) {
        if let (Some(a), Ok(c)) = (self.assign.get(bucket & self.mask), u16::try_from(cpu)) {
            if c != NO_CPU {
                a.store(c, Ordering::Relaxed);
            }
        }
    }

    /// Drops `bucket`'s assignment: its flows go back to plain RPS.
    pub fn clear(&self, bucket: usize) {
        if let Some(a) = self.assign.get(bucket & self.mask) {
            a.store(NO_CPU, Ordering::Relaxed);
        }
    }

    /// Drops every assignment; returns how many there were.
    pub fn clear_all(&self) -> usize {
        self.assign
            .iter()
            .filter(|a| a.swap(NO_CPU, Ordering::Relaxed) != NO_CPU)
            .count()
    }
}

/// The balancer's counters, as a snapshot (missing fields deserialize as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BalanceStats {
    /// Whether the balancer is on.
    pub on: bool,
    /// Rounds run while on.
    pub rounds: u64,
    /// Units moved to a worker behind the same LLC.
    pub moves_same_llc: u64,
    /// Units moved to a worker behind another LLC.
    pub moves_cross_llc: u64,
    /// Assignments dropped because their CPU went away or their unit idled.
    pub released: u64,
    /// Elephants (units carrying at least the mean load alone) left in place
    /// in the last round.
    pub elephants: u64,
    /// Rounds that found at least one elephant.
    pub elephant_rounds: u64,
    /// The most loaded worker's load over the mean, in thousandths, in the
    /// last round (1000: balanced).
    pub max_over_mean_milli: u64,
}

impl BalanceStats {
    /// Every move.
    pub fn moves(&self) -> u64 {
        self.moves_same_llc + self.moves_cross_llc
    }

    /// Moves for `reason`.
    pub fn moves_for(&self, reason: MoveReason) -> u64 {
        match reason {
            MoveReason::SameLlc => self.moves_same_llc,
            MoveReason::CrossLlc => self.moves_cross_llc,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    rounds: AtomicU64,
    moves_same_llc: AtomicU64,
    moves_cross_llc: AtomicU64,
    released: AtomicU64,
    elephants: AtomicU64,
    elephant_rounds: AtomicU64,
    max_over_mean_milli: AtomicU64,
}

/// The balancer's part of the shared state: its run-time switch, every rx
/// queue's [`BucketLoads`] (registered by the dispatchers as they start) and
/// its counters.
///
/// ```
/// use steer_core::balance::{BalanceShared, MoveReason};
/// let b = BalanceShared::default();
/// assert!(!b.is_on());
/// b.set_on(true);
/// let loads = b.register(0, 1024);
/// assert!(std::sync::Arc::ptr_eq(&loads, &b.tables()[0]));
/// b.count_move(MoveReason::SameLlc);
/// assert_eq!(b.stats().moves(), 1);
/// ```
#[derive(Debug, Default)]
pub struct BalanceShared {
    on: AtomicBool,
    tables: Mutex<Vec<Arc<BucketLoads>>>,
    counters: CachePadded<Counters>,
    /// The balancer's thread, woken when switched on.
    waker: Mutex<Option<std::thread::Thread>>,
}

impl BalanceShared {
    /// Whether the balancer is on (one relaxed load; dispatchers read it
    /// once per batch).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Switches the balancer on or off. Off, dispatchers ignore the
    /// assignments (flows go back to plain RPS, through `last_qtail`). Wakes
    /// the balancer's thread, if one is registered.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
        if let Some(t) = &*self.waker.lock().unwrap_or_else(PoisonError::into_inner) {
            t.unpark();
        }
    }

    /// Registers (or, with `None`, forgets) the thread [`set_on`](Self::set_on)
    /// wakes.
    pub fn set_waker(&self, thread: Option<std::thread::Thread>) {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = thread;
    }

    /// The loads of rx queue `rxq` (a table of `entries` buckets), created
    /// on first use; a dispatcher started again for the same queue gets a
    /// fresh one in its place.
    pub fn register(&self, rxq: u32, entries: usize) -> Arc<BucketLoads> {
        let loads = Arc::new(BucketLoads::new(rxq, entries));
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        tables.retain(|t| t.rxq() != rxq);
        tables.push(Arc::clone(&loads));
        tables.sort_by_key(|t| t.rxq());
        loads
    }

    /// Every registered rx queue's loads, by rx queue.
    pub fn tables(&self) -> Vec<Arc<BucketLoads>> {
        self.tables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counts a round, with how many elephants it found and the max/mean
    /// load it saw (in thousandths).
    pub fn count_round(&self, elephants: usize, max_over_mean_milli: u64) {
        let c = &self.counters;
        c.rounds.fetch_add(1, Ordering::Relaxed);
        c.elephants.store(elephants as u64, Ordering::Relaxed);
        if elephants > 0 {
            c.elephant_rounds.fetch_add(1, Ordering::Relaxed);
        }
        c.max_over_mean_milli
            .store(max_over_mean_milli, Ordering::Relaxed);
    }

    /// Counts a move.
    pub fn count_move(&self, reason: MoveReason) {
        let c = &self.counters;
        match reason {
            MoveReason::SameLlc => c.moves_same_llc.fetch_add(1, Ordering::Relaxed),
            MoveReason::CrossLlc => c.moves_cross_llc.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Counts `n` dropped assignments.
    pub fn count_released(&self, n: u64) {
        self.counters.released.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn stats(&self) -> BalanceStats {
        let c = &self.counters;
        BalanceStats {
            on: self.is_on(),
            rounds: c.rounds.load(Ordering::Relaxed),
            moves_same_llc: c.moves_same_llc.load(Ordering::Relaxed),
            moves_cross_llc: c.moves_cross_llc.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
            elephants: c.elephants.load(Ordering::Relaxed),
            elephant_rounds: c.elephant_rounds.load(Ordering::Relaxed),
            max_over_mean_milli: c.max_over_mean_milli.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_wrap_and_cpu_follows_the_last_packet() {
        let l = BucketLoads::new(1, 4);
        assert_eq!(l.seen(2), (0, None));
        l.note(2, 0);
        l.note(6, 1); // same bucket, masked
        assert_eq!(l.seen(2), (2, Some(1)));
        assert_eq!(BucketLoads::delta(1, COUNT_MASK), 2);
        l.assign(1, 70_000); // does not fit: ignored
        assert_eq!(l.assigned(1), None);
        l.assign(1, 3);
        l.assign(2, 0);
        assert_eq!(l.clear_all(), 2);
        assert_eq!(l.assigned(1), None);
    }

    #[test]
    fn registering_a_queue_again_replaces_its_loads() {
        let b = BalanceShared::default();
        let first = b.register(1, 8);
        b.register(0, 8);
        let again = b.register(1, 16);
        let tables = b.tables();
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[1].len(), 16);
        assert!(!Arc::ptr_eq(&first, &again));
    }
}
