//! Sheds new flows while the application falls behind: CoDel applied to
//! flow admission. The budget bounds how many flows are open; this bounds
//! how much work new flows may queue up in the application's runtime.
//!
//! The signal is a new flow's *wait*: from the moment the worker offers it
//! to the moment the application first reads it (accept backlog, task
//! spawn, run queue). Like CoDel's sojourn time, the minimum wait over an
//! interval tells standing queue from a burst: when even the quickest new
//! flow of the last [`INTERVAL_NS`] waited more than [`TARGET_NS`], the
//! runtime is overloaded, and new flows are refused (counted as
//! `overload`) but for one probe every [`PROBE_NS`], whose waits tell when
//! the queue is gone. Established flows are never shed: their datagrams go
//! on to their queues, and their tasks no longer wait behind a flood of
//! new ones.
//!
//! Invariants: one clock read per new flow and one per flow's first read,
//! none per datagram; every field is an atomic the workers and readers
//! update without a lock; a state with no sample for two intervals is
//! stale and stops shedding.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// A new flow waiting longer than this, at best, over an interval means a
/// standing queue.
pub const TARGET_NS: u64 = 2_000_000;
/// The window the minimum wait is taken over.
pub const INTERVAL_NS: u64 = 25_000_000;
/// While shedding, one new flow is let through this often, to measure.
pub const PROBE_NS: u64 = 5_000_000;

/// The overload detector of one engine's flow delivery.
#[derive(Debug, Default)]
pub(crate) struct Overload {
    interval_start: AtomicU64,
    interval_min: AtomicU64,
    shedding: AtomicBool,
    last_probe: AtomicU64,
}

impl Overload {
    /// A new flow was first read `wait_ns` after it was offered, at `now`.
    pub(crate) fn sample(&self, wait_ns: u64, now: u64) {
        let start = self.interval_start.load(Relaxed);
        if now.saturating_sub(start) >= INTERVAL_NS {
            // The interval is over: judge it, start the next with this sample.
            if self
                .interval_start
                .compare_exchange(start, now, Relaxed, Relaxed)
                .is_ok()
            {
                let min = self.interval_min.swap(wait_ns, Relaxed);
                self.shedding.store(start != 0 && min > TARGET_NS, Relaxed);
                return;
            }
        }
        self.interval_min.fetch_min(wait_ns, Relaxed);
    }

    /// Whether a new flow arriving at `now` may be admitted.
    pub(crate) fn admit(&self, now: u64) -> bool {
        if !self.shedding.load(Relaxed) {
            return true;
        }
        let start = self.interval_start.load(Relaxed);
        if now.saturating_sub(start) >= 2 * INTERVAL_NS {
            // No sample for two intervals: nothing says it is still busy.
            self.shedding.store(false, Relaxed);
            return true;
        }
        let last = self.last_probe.load(Relaxed);
        now.saturating_sub(last) >= PROBE_NS
            && self
                .last_probe
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
    }

    /// Whether it sheds new flows now.
    #[cfg(test)]
    fn shedding(&self) -> bool {
        self.shedding.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_standing_queue_sheds_and_probes_and_its_end_stops_shedding() {
        let o = Overload::default();
        let mut now = 1_000 * MS;
        // Quick waits: never shedding.
        for _ in 0..50 {
            o.sample(MS / 10, now);
            now += 5 * MS;
        }
        assert!(!o.shedding() && o.admit(now));
        // Every wait over the target for an interval: shedding.
        for _ in 0..50 {
            o.sample(20 * MS, now);
            now += 5 * MS;
        }
        assert!(o.shedding());
        // One probe per PROBE_NS.
        let admitted = (0..PROBE_NS / (MS / 10))
            .filter(|i| o.admit(now + i * MS / 10))
            .count();
        assert_eq!(admitted, 1);
        // The probes come back quick: shedding ends at the next interval.
        for _ in 0..50 {
            o.sample(MS / 10, now);
            now += 5 * MS;
        }
        assert!(!o.shedding());
    }

    #[test]
    fn one_slow_flow_in_an_interval_of_quick_ones_is_a_burst_not_a_queue() {
        let o = Overload::default();
        let mut now = 1_000 * MS;
        for i in 0..100 {
            o.sample(if i % 10 == 0 { 50 * MS } else { MS / 10 }, now);
            now += 5 * MS;
        }
        assert!(!o.shedding());
    }

    #[test]
    fn a_stale_state_stops_shedding() {
        let o = Overload::default();
        let mut now = 1_000 * MS;
        for _ in 0..50 {
            o.sample(20 * MS, now);
            now += 5 * MS;
        }
        assert!(o.shedding());
        assert!(o.admit(now + 3 * INTERVAL_NS));
        assert!(!o.shedding());
    }
}
