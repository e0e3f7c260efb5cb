//! The per-rx-queue flow table (the kernel's `rps_dev_flow_table`): which CPU
//! currently serves each flow arriving on one rx queue, and whether moving
//! the flow to the CPU its consumer now wants could reorder it.
//!
//! One table per rx queue, owned (`&mut self`) by that queue's dispatcher; no
//! atomics on the per-packet path. Each bucket (`hash & (len - 1)`) holds the
//! serving CPU, `last_qtail`, a last-used tick, and, in a cold side array, the
//! [`FilterId`] the steering hook handed out for it.
//!
//! # The ordering invariant
//!
//! Every CPU's queue has two monotonic counters: `enqueued` (its tail) and
//! `dequeued` (its head). After the dispatcher queues a flow's packet on CPU
//! `c` it stores `c`'s `enqueued` count in the bucket's `last_qtail`
//! ([`RxFlowTable::note_enqueued`]). The flow may switch from `c` to the CPU
//! its consumer desires only if one of these holds (the kernel's comment in
//! `get_rps_cpu`):
//! - the current CPU is unset;
//! - the current CPU's queue is gone (its worker died; what it held was
//!   returned to the pool, so nothing is left to overtake);
//! - `c`'s `dequeued` count has reached `last_qtail`: every packet of the flow
//!   queued on `c` has left that queue, so a packet queued on the new CPU
//!   cannot overtake one still waiting on the old.
//!
//! Unlike the kernel, an *offline* CPU whose queue still exists and still
//! holds packets of the flow keeps the flow until they are handled (its
//! worker keeps draining, wherever the scheduler moved it): the kernel
//! re-injects a dead CPU's backlog elsewhere and accepts the reordering;
//! steer promises none. An offline CPU is never chosen for a new placement.
//!
//! Otherwise the move is held back (counted) and the packet goes to `c`. For
//! the guarantee to cover processing and not just dequeueing, a worker should
//! advance its `dequeued` counter (with release ordering) only once the
//! packets are handled, including what handling leaves for later (steer's
//! workers publish it after the batch's replies are sent), and
//! [`QueueHeads`] should read it with acquire.
//!
//! # Expiry
//!
//! Entries whose flow has been idle for a timeout and has nothing left queued
//! are expired by [`RxFlowTable::sweep`] (the `rps_may_expire_flow` analog,
//! in `expiry.rs`), which removes their hook state. The sweep is meant for
//! the dispatcher's idle step, does a bounded slice of the table per call,
//! and never runs from [`RxFlowTable::steer`].
//!
//! # Cache discipline
//!
//! Buckets are 16 bytes of hot data (4 per cache line); filter ids, touched
//! only on moves and expiry, live apart. The last-used tick is written at
//! most once per tick (checked before writing). The counters, read by
//! monitoring threads, sit on their own padded line behind an `Arc`
//! ([`RxFlowCounters`], in `counters.rs`).

mod counters;
mod expiry;

pub use counters::{RxFlowCounters, RxFlowStats};
pub use expiry::SweepReport;

use crate::cpu::{CpuId, CpuLayout};
use crate::flow::FlowKey;
use crate::hook::{FilterId, FlowMove, NoopHook, SteerHook};
use crate::table::desired::{TableError, MAX_ENTRIES};
use counters::bump;

/// Coarse time for the last-used marks and expiry, supplied by the caller
/// (e.g. milliseconds or a loop counter). Compared with wrapping arithmetic,
/// so timeouts must stay below `2^31` ticks.
pub type Tick = u32;

/// A CPU's queue counters as the dispatcher sees them.
///
/// Implemented for closures `Fn(CpuId) -> Option<u64>`.
pub trait QueueHeads {
    /// How many packets have been dequeued from `cpu`'s queue so far (its
    /// monotonic head), or `None` if `cpu` has no queue (worker gone).
    fn dequeued(&self, cpu: CpuId) -> Option<u64>;
}

impl<F: Fn(CpuId) -> Option<u64>> QueueHeads for F {
    #[inline]
    fn dequeued(&self, cpu: CpuId) -> Option<u64> {
        self(cpu)
    }
}

const NO_CPU: u16 = u16::MAX;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The serving CPU's `enqueued` count after the flow's last packet.
    last_qtail: u64,
    /// Tick of the last packet (written at most once per tick).
    last_used: Tick,
    /// The serving CPU, or `NO_CPU`.
    cpu: u16,
}

impl Bucket {
    const EMPTY: Self = Self {
        last_qtail: 0,
        last_used: 0,
        cpu: NO_CPU,
    };

    #[inline]
    fn cpu(&self) -> Option<CpuId> {
        (self.cpu != NO_CPU).then_some(self.cpu as CpuId)
    }
}

/// What [`RxFlowTable::steer`] did with a packet's flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerAction {
    /// The flow stays on its current CPU (already the desired one, or no
    /// usable desire).
    Stayed,
    /// The flow moved to the desired CPU; the hook was called.
    Moved {
        /// The CPU that served it before, if any.
        from: Option<CpuId>,
    },
    /// The flow wants `desired` but packets of it are still queued on the
    /// current CPU: it stays there for now.
    HeldBack {
        /// The CPU the consumer wants.
        desired: CpuId,
    },
    /// Neither a usable desired CPU nor a usable current CPU (or hash 0): the
    /// dispatcher falls back to plain RPS hashing.
    NoTarget,
}

/// The answer of [`RxFlowTable::steer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steered {
    /// The bucket of the flow; pass it to [`RxFlowTable::note_enqueued`].
    pub bucket: usize,
    /// The CPU to queue the packet on (`None` with [`SteerAction::NoTarget`]).
    pub cpu: Option<CpuId>,
    /// What happened.
    pub action: SteerAction,
}

/// The per-rx-queue flow table (`rps_dev_flow_table`), owned by one
/// dispatcher.
///
/// ```
/// use steer_core::cpu::CpuLayout;
/// use steer_core::hook::RecordingHook;
/// use steer_core::table::{RxFlowTable, SteerAction};
///
/// let layout = CpuLayout::uniform(4, 2).unwrap();
/// let mut t = RxFlowTable::with_hook(0, 256, RecordingHook::default()).unwrap();
/// let mut dequeued = [0u64; 4];
/// let flow = 0x1234_5678;
///
/// // First packet: the flow is placed on its desired CPU 1 and queued there.
/// let s = t.steer(flow, Some(1), &layout, &|c: usize| dequeued.get(c).copied(), 0);
/// assert_eq!((s.cpu, s.action), (Some(1), SteerAction::Moved { from: None }));
/// t.note_enqueued(s.bucket, 1); // CPU 1's enqueued count is now 1
///
/// // The consumer moved to CPU 3, but the packet on CPU 1 is not dequeued yet.
/// let s = t.steer(flow, Some(3), &layout, &|c: usize| dequeued.get(c).copied(), 0);
/// assert_eq!((s.cpu, s.action), (Some(1), SteerAction::HeldBack { desired: 3 }));
///
/// // Once CPU 1 has dequeued it, the flow may move.
/// dequeued[1] = 1;
/// let s = t.steer(flow, Some(3), &layout, &|c: usize| dequeued.get(c).copied(), 0);
/// assert_eq!((s.cpu, s.action), (Some(3), SteerAction::Moved { from: Some(1) }));
/// assert_eq!(t.stats().held_back, 1);
/// assert_eq!(t.hook().steer_calls(), 2);
/// ```
#[derive(Debug)]
#[doc(alias("rps_dev_flow_table", "rps_dev_flow"))]
pub struct RxFlowTable<H: SteerHook = NoopHook> {
    // Read-mostly.
    rxq: u32,
    mask: usize,
    // Hot, written by the owning dispatcher only.
    buckets: Box<[Bucket]>,
    // Cold: touched on moves and expiry.
    filters: Box<[Option<FilterId>]>,
    sweep_cursor: usize,
    hook: H,
    counters: RxFlowCounters,
}

impl RxFlowTable<NoopHook> {
    /// A table of `entries` buckets (a power of two) for rx queue `rxq`,
    /// with no steering hook.
    pub fn new(rxq: u32, entries: usize) -> Result<Self, TableError> {
        Self::with_hook(rxq, entries, NoopHook)
    }
}

impl<H: SteerHook> RxFlowTable<H> {
    /// A table of `entries` buckets (a power of two) for rx queue `rxq`,
    /// calling `hook` when a flow moves.
    pub fn with_hook(rxq: u32, entries: usize, hook: H) -> Result<Self, TableError> {
        if entries == 0 || !entries.is_power_of_two() || entries > MAX_ENTRIES {
            return Err(TableError::BadSize(entries));
        }
        Ok(Self {
            rxq,
            mask: entries - 1,
            buckets: vec![Bucket::EMPTY; entries].into_boxed_slice(),
            filters: vec![None; entries].into_boxed_slice(),
            sweep_cursor: 0,
            hook,
            counters: RxFlowCounters::new(),
        })
    }

    /// The rx queue this table serves.
    pub fn rxq(&self) -> u32 {
        self.rxq
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Always false: a table has at least one bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// The bucket flow `hash` maps to.
    #[inline]
    pub fn bucket_of(&self, hash: u32) -> usize {
        hash as usize & self.mask
    }

    /// The steering hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The steering hook, mutably (to reconfigure it).
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }

    /// A handle on the counters for other threads.
    pub fn counters(&self) -> RxFlowCounters {
        self.counters.clone()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RxFlowStats {
        self.counters.snapshot()
    }

    /// The CPU serving bucket `bucket`, if any.
    pub fn cpu_of(&self, bucket: usize) -> Option<CpuId> {
        self.buckets.get(bucket).and_then(Bucket::cpu)
    }

    /// The `last_qtail` of bucket `bucket` (0 for a bucket out of range).
    pub fn last_qtail(&self, bucket: usize) -> u64 {
        self.buckets.get(bucket).map_or(0, |b| b.last_qtail)
    }

    /// The hook filter bucket `bucket` holds.
    pub fn filter_of(&self, bucket: usize) -> Option<FilterId> {
        self.filters.get(bucket).copied().flatten()
    }

    /// Chooses the CPU for a packet of flow `hash` whose consumer desires
    /// `desired` (from [`crate::table::DesiredCpuTable::lookup`]; pass the
    /// RPS choice when there is no desire), applying the ordering invariant
    /// (module docs). `now` marks the flow used. Calls the hook when the flow
    /// moves. Never sweeps.
    #[inline]
    #[doc(alias = "set_rps_cpu")]
    pub fn steer(
        &mut self,
        hash: u32,
        desired: Option<CpuId>,
        layout: &CpuLayout,
        heads: &impl QueueHeads,
        now: Tick,
    ) -> Steered {
        self.steer_keyed(hash, desired, layout, heads, now, || None)
    }

    /// [`RxFlowTable::steer`], with the flow's key for the hook: `key` is
    /// called only when the flow moves (off the per-packet path), and its
    /// answer goes to the hook in [`FlowMove::key`].
    #[inline]
    pub fn steer_keyed(
        &mut self,
        hash: u32,
        desired: Option<CpuId>,
        layout: &CpuLayout,
        heads: &impl QueueHeads,
        now: Tick,
        key: impl FnOnce() -> Option<FlowKey>,
    ) -> Steered {
        let bucket = self.bucket_of(hash);
        let Some(b) = self.buckets.get_mut(bucket) else {
            return Steered {
                bucket,
                cpu: None,
                action: SteerAction::NoTarget,
            };
        };
        if hash == 0 {
            return Steered {
                bucket,
                cpu: None,
                action: SteerAction::NoTarget,
            };
        }
        if b.last_used != now {
            b.last_used = now;
        }
        let current = b.cpu();
        // Fast path, the common case: the flow is already on its desired CPU,
        // which is online and has a queue.
        if let Some(c) = current.filter(|&c| desired == Some(c)) {
            if layout.is_online(c) && heads.dequeued(c).is_some() {
                return Steered {
                    bucket,
                    cpu: Some(c),
                    action: SteerAction::Stayed,
                };
            }
        }
        let current_head = current.and_then(|c| heads.dequeued(c));
        let current_ok = current.filter(|&c| layout.is_online(c) && current_head.is_some());
        // Earlier packets of the flow still queued on the current CPU (online
        // or not): the flow must stay there until they are handled.
        let pending = current_head.is_some_and(|head| head < b.last_qtail);
        // A desired CPU is usable if it is online, has a queue, and fits.
        let next = desired.filter(|&c| {
            c < usize::from(NO_CPU) && layout.is_online(c) && heads.dequeued(c).is_some()
        });
        let stay = |cpu: Option<CpuId>| Steered {
            bucket,
            cpu,
            action: if cpu.is_some() {
                SteerAction::Stayed
            } else {
                SteerAction::NoTarget
            },
        };
        let Some(next) = next else {
            return stay(if pending { current } else { current_ok });
        };
        if current == Some(next) {
            return stay(current_ok);
        }
        if pending {
            bump(&self.counters.0.held_back);
            return Steered {
                bucket,
                cpu: current,
                action: SteerAction::HeldBack { desired: next },
            };
        }
        self.move_flow(bucket, hash, current, next, heads, key())
    }

    #[cold]
    fn move_flow(
        &mut self,
        bucket: usize,
        hash: u32,
        from: Option<CpuId>,
        to: CpuId,
        heads: &impl QueueHeads,
        key: Option<FlowKey>,
    ) -> Steered {
        let filter = self.filter_of(bucket);
        let mv = FlowMove {
            rxq: self.rxq,
            bucket,
            hash,
            key,
            from,
            to,
            filter,
        };
        let c = &self.counters.0;
        bump(&c.hook_calls);
        match self.hook.steer(&mv) {
            Ok(new_filter) => {
                if let Some(slot) = self.filters.get_mut(bucket) {
                    *slot = new_filter;
                }
            }
            Err(_) => bump(&c.hook_errors),
        }
        bump(&c.moves);
        if let Some(b) = self.buckets.get_mut(bucket) {
            // Nothing of the flow is queued on `to` yet: start from its head.
            b.last_qtail = heads.dequeued(to).unwrap_or(0);
            b.cpu = u16::try_from(to).unwrap_or(NO_CPU);
        }
        Steered {
            bucket,
            cpu: Some(to),
            action: SteerAction::Moved { from },
        }
    }

    /// Records that a packet of the flow in `bucket` was queued and its CPU's
    /// `enqueued` count is now `tail`. Out-of-range buckets are ignored.
    #[inline]
    pub fn note_enqueued(&mut self, bucket: usize, tail: u64) {
        if let Some(b) = self.buckets.get_mut(bucket) {
            b.last_qtail = tail;
        }
    }

    /// Whether an earlier packet of the flow in `bucket` is still queued on
    /// its serving CPU (that CPU's head is below `last_qtail`).
    #[inline]
    pub fn has_queued(&self, bucket: usize, heads: &impl QueueHeads) -> bool {
        match self.buckets.get(bucket) {
            Some(b) => b
                .cpu()
                .and_then(|c| heads.dequeued(c))
                .is_some_and(|head| head < b.last_qtail),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{HookError, RecordingHook};

    #[test]
    fn bucket_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Bucket>(), 16);
    }

    #[test]
    fn bad_sizes_rejected() {
        assert_eq!(RxFlowTable::new(0, 0).unwrap_err(), TableError::BadSize(0));
        assert_eq!(RxFlowTable::new(0, 6).unwrap_err(), TableError::BadSize(6));
    }

    #[test]
    fn last_used_written_once_per_tick() {
        let layout = CpuLayout::uniform(2, 2).unwrap();
        let heads = |_c: CpuId| Some(0u64);
        let mut t = RxFlowTable::new(0, 8).unwrap();
        let s = t.steer(5, Some(0), &layout, &heads, 7);
        assert_eq!(t.buckets[s.bucket].last_used, 7);
        t.steer(5, Some(0), &layout, &heads, 7);
        assert_eq!(t.buckets[s.bucket].last_used, 7);
        t.steer(5, Some(0), &layout, &heads, 8);
        assert_eq!(t.buckets[s.bucket].last_used, 8);
    }

    #[test]
    fn hook_failure_still_moves_and_is_counted() {
        let layout = CpuLayout::uniform(2, 2).unwrap();
        let heads = |_c: CpuId| Some(0u64);
        let mut hook = RecordingHook::default();
        hook.fail_with = Some(HookError::Unsupported);
        let mut t = RxFlowTable::with_hook(0, 8, hook).unwrap();
        let s = t.steer(5, Some(1), &layout, &heads, 0);
        assert_eq!(s.cpu, Some(1));
        assert_eq!(t.filter_of(s.bucket), None);
        let st = t.stats();
        assert_eq!((st.hook_calls, st.hook_errors, st.moves), (1, 1, 1));
    }
}
