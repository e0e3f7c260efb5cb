//! The kernel's `flow_limit` for one target CPU: when the CPU's queue is more
//! than half full, a flow that sent more than half of the recent packets to
//! it is an elephant and its packets are dropped (counted), so it cannot
//! starve the other flows sharing that CPU.
//!
//! State: a history of the last [`HISTORY`] flow buckets queued to the CPU
//! while it was over half full, and a count per bucket (a table of a
//! power-of-two number of buckets, the kernel's `flow_limit_table_len`;
//! flows sharing a bucket are counted together). Only the dispatcher that
//! owns it touches it.
//!
//! The limit needs room to act: an elephant is recognised after more than
//! `HISTORY / 2` of its packets were seen over half full, so a queue
//! smaller than `2 * (HISTORY / 2 + 1)` slots fills before that.

/// Packets of history kept per target CPU (the kernel's
/// `FLOW_LIMIT_HISTORY`).
pub const HISTORY: usize = 128;

/// The kernel's default table length (`net.core.flow_limit_table_len`).
pub const DEFAULT_BUCKETS: usize = 4096;

/// Flow-limit state for one target CPU.
#[derive(Debug, Clone)]
#[doc(alias("sd_flow_limit", "flow_limit"))]
pub struct FlowLimit {
    history: [u16; HISTORY],
    pos: usize,
    counts: Box<[u8]>,
    mask: usize,
}

impl Default for FlowLimit {
    /// [`DEFAULT_BUCKETS`] buckets.
    fn default() -> Self {
        Self::with_buckets(DEFAULT_BUCKETS)
    }
}

impl FlowLimit {
    /// The largest table: history entries are 16-bit bucket numbers.
    pub const MAX_BUCKETS: usize = 1 << 16;

    /// A flow limit with a table of `buckets` counters: a power of two from
    /// 1 to [`Self::MAX_BUCKETS`], `None` otherwise.
    ///
    /// ```
    /// use steer_core::dispatch::FlowLimit;
    /// assert!(FlowLimit::new(4096).is_some());
    /// assert!(FlowLimit::new(0).is_none());
    /// assert!(FlowLimit::new(1000).is_none());
    /// ```
    pub fn new(buckets: usize) -> Option<Self> {
        (buckets.is_power_of_two() && buckets <= Self::MAX_BUCKETS)
            .then(|| Self::with_buckets(buckets))
    }

    fn with_buckets(buckets: usize) -> Self {
        Self {
            history: [0; HISTORY],
            pos: 0,
            counts: vec![0; buckets].into_boxed_slice(),
            mask: buckets - 1,
        }
    }

    /// Buckets of the table.
    pub fn buckets(&self) -> usize {
        self.counts.len()
    }

    /// Notes a packet of flow `hash` headed for this CPU, whose queue is
    /// `fill` full out of `capacity`; returns true if it must be dropped.
    #[inline]
    #[doc(alias = "skb_flow_limit")]
    pub fn over_limit(&mut self, hash: u32, fill: usize, capacity: usize) -> bool {
        if fill <= capacity / 2 {
            return false;
        }
        let bucket = (hash as usize) & self.mask;
        let old = usize::from(self.history[self.pos]);
        self.counts[old] = self.counts[old].saturating_sub(1);
        // `bucket <= mask < MAX_BUCKETS = 1 << 16`.
        self.history[self.pos] = bucket as u16;
        self.pos = (self.pos + 1) % HISTORY;
        self.counts[bucket] = self.counts[bucket].saturating_add(1);
        usize::from(self.counts[bucket]) > HISTORY / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inactive_below_half_full() {
        let mut fl = FlowLimit::default();
        assert!((0..1000).all(|_| !fl.over_limit(7, 10, 64)));
    }

    #[test]
    fn elephant_is_limited_mice_are_not() {
        for buckets in [1024, DEFAULT_BUCKETS, FlowLimit::MAX_BUCKETS] {
            let mut fl = FlowLimit::new(buckets).unwrap();
            let mut dropped_elephant = 0;
            let mut dropped_mice = 0;
            for i in 0..10_000u32 {
                if i % 4 == 0 {
                    dropped_mice += u32::from(fl.over_limit(1000 + i, 60, 64));
                } else {
                    dropped_elephant += u32::from(fl.over_limit(7, 60, 64));
                }
            }
            assert!(dropped_elephant > 7000, "{dropped_elephant}");
            assert_eq!(dropped_mice, 0);
        }
    }

    #[test]
    fn table_sizes_are_powers_of_two_up_to_the_history_range() {
        assert_eq!(FlowLimit::new(1).unwrap().buckets(), 1);
        assert_eq!(FlowLimit::default().buckets(), DEFAULT_BUCKETS);
        assert!(FlowLimit::new(FlowLimit::MAX_BUCKETS).is_some());
        assert!(FlowLimit::new(FlowLimit::MAX_BUCKETS * 2).is_none());
        assert!(FlowLimit::new(0).is_none());
        assert!(FlowLimit::new(3).is_none());
    }
}
