//! The kernel's `flow_limit` for one target CPU: when the CPU's queue is more
//! than half full, a flow that sent more than half of the recent packets to
//! it is an elephant and its packets are dropped (counted), so it cannot
//! starve the other flows sharing that CPU.
//!
//! State: a history of the last [`HISTORY`] flow buckets queued to the CPU and
//! a count per bucket. Only the dispatcher that owns it touches it.

/// Packets of history kept per target CPU.
pub const HISTORY: usize = 128;
const BUCKETS: usize = 1024;

/// Flow-limit state for one target CPU.
#[derive(Debug, Clone)]
#[doc(alias("sd_flow_limit", "flow_limit"))]
pub struct FlowLimit {
    history: [u16; HISTORY],
    pos: usize,
    counts: Box<[u8; BUCKETS]>,
}

impl Default for FlowLimit {
    fn default() -> Self {
        Self {
            history: [0; HISTORY],
            pos: 0,
            counts: Box::new([0; BUCKETS]),
        }
    }
}

impl FlowLimit {
    /// Notes a packet of flow `hash` headed for this CPU, whose queue is
    /// `fill` full out of `capacity`; returns true if it must be dropped.
    #[inline]
    #[doc(alias = "skb_flow_limit")]
    pub fn over_limit(&mut self, hash: u32, fill: usize, capacity: usize) -> bool {
        if fill <= capacity / 2 {
            return false;
        }
        let bucket = (hash as usize) & (BUCKETS - 1);
        let old = usize::from(self.history[self.pos]);
        self.counts[old] = self.counts[old].saturating_sub(1);
        // `bucket < BUCKETS <= u16::MAX`.
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
        let mut fl = FlowLimit::default();
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
