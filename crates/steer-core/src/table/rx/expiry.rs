//! Expiry of idle rx-queue flow entries ([`RxFlowTable::sweep`], the
//! kernel's `rps_may_expire_flow`).
//!
//! An entry expires when its flow has not been seen for a timeout and
//! nothing of it is still queued (or its CPU's queue is gone): forgetting it
//! then cannot let a later packet overtake an earlier one. Its hook state
//! (a [`FilterId`](crate::hook::FilterId)) is removed through the hook.
//! A sweep scans a bounded slice of the table per call, round robin, and
//! is meant for the owning dispatcher's idle step: never the per-packet
//! path.

use super::counters::bump;
use super::{Bucket, QueueHeads, RxFlowTable, Tick};
use crate::cpu::CpuLayout;
use crate::hook::SteerHook;

/// What one [`RxFlowTable::sweep`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Buckets looked at.
    pub scanned: usize,
    /// Entries expired.
    pub expired: usize,
    /// Hook states removed.
    pub removed: usize,
}

impl<H: SteerHook> RxFlowTable<H> {
    /// Expires idle entries in the next `budget` buckets (round-robin over
    /// calls): an entry expires when its flow has not been seen for
    /// `idle_timeout` ticks and nothing of it is still queued (or its CPU's
    /// queue is gone); an offline CPU still draining the flow keeps it. Its
    /// hook state is removed through the hook and the bucket is emptied, so
    /// the flow's next packet is placed afresh. `_layout` is unused (kept so
    /// callers need not change).
    ///
    /// Meant for a background or idle step of the owning dispatcher; never
    /// called on the per-packet path.
    #[doc(alias = "rps_may_expire_flow")]
    pub fn sweep(
        &mut self,
        _layout: &CpuLayout,
        heads: &impl QueueHeads,
        now: Tick,
        idle_timeout: Tick,
        budget: usize,
    ) -> SweepReport {
        let mut report = SweepReport::default();
        let len = self.buckets.len();
        for _ in 0..budget.min(len) {
            let i = self.sweep_cursor;
            self.sweep_cursor = (i + 1) & self.mask;
            report.scanned += 1;
            let Some(b) = self.buckets.get_mut(i) else {
                continue;
            };
            let Some(cpu) = b.cpu() else { continue };
            if now.wrapping_sub(b.last_used) < idle_timeout {
                continue;
            }
            // Like `steer`, judge an offline CPU by its queue: while it still
            // holds packets of the flow, forgetting the entry would let the
            // next packet be placed elsewhere and overtake them.
            let drained = heads.dequeued(cpu).is_none_or(|head| head >= b.last_qtail);
            if !drained {
                continue;
            }
            *b = Bucket::EMPTY;
            report.expired += 1;
            bump(&self.counters.0.expired);
            if let Some(filter) = self.filters.get_mut(i).and_then(Option::take) {
                self.hook.remove(self.rxq, i, filter);
                report.removed += 1;
                bump(&self.counters.0.hook_removes);
            }
        }
        report
    }
}
