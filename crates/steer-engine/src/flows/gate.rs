//! When the XDP program's new-flow gate closes and opens, and which flows
//! it counts as admitted: the flow table's side of steer-xdp's
//! [`AdmissionGate`].
//!
//! The gate closes when the table holds its whole budget (`open >=
//! max_flows`) and opens again once a sixteenth of the budget is free, so
//! a table at the edge does not flip it on every flow. While it is closed,
//! the XDP program drops the first datagram of every flow the table has not
//! admitted, before it costs a worker anything, and lets the same flow's
//! retry through: a datagram of an unknown flow that reaches the table then
//! is taken for a retry (it is, but for the few spray flows that share a
//! slot with an open flow), and draws on the whole eviction pace.
//!
//! Invariants: every flow in the table is counted in the gate exactly once
//! (counted at insert, uncounted at removal and eviction), so the gate
//! never drops an admitted flow's datagrams; without an XDP gate (unit
//! tests, a program without one) nothing here has any effect: no arrival
//! is taken for a retry, and no closing is counted.

use std::sync::Arc;

use steer_core::flow::FlowKey;
use steer_xdp::{AdmissionGate, FlowMapKey};
use tracing::{info, warn};

/// The table's handle on the XDP gate.
#[derive(Debug, Default)]
pub(crate) struct FlowGate {
    xdp: Option<Arc<AdmissionGate>>,
    /// An XDP gate drops first tries while closed (`xdp` is there, or a
    /// test simulates one).
    drops: bool,
    closed: bool,
    /// Times an XDP gate closed.
    pub(crate) closings: u64,
    /// When a switch was last logged (at most one line a second).
    logged: Option<std::time::Instant>,
}

impl FlowGate {
    /// A gate driving `xdp` (none: the state is kept, nothing is dropped).
    pub(crate) fn new(xdp: Option<Arc<AdmissionGate>>) -> Self {
        Self {
            drops: xdp.is_some(),
            xdp,
            ..Self::default()
        }
    }

    /// A gate that behaves as if an XDP program dropped first tries while
    /// it is closed (for the table's tests).
    #[cfg(test)]
    pub(crate) fn simulated() -> Self {
        Self {
            drops: true,
            ..Self::default()
        }
    }

    /// Counts `key` as admitted.
    pub(crate) fn added(&self, key: &FlowKey) {
        if let (Some(xdp), Some(k)) = (&self.xdp, FlowMapKey::from_flow(key)) {
            xdp.admit(&k);
        }
    }

    /// Uncounts `key`.
    pub(crate) fn removed(&self, key: &FlowKey) {
        if let (Some(xdp), Some(k)) = (&self.xdp, FlowMapKey::from_flow(key)) {
            xdp.release(&k);
        }
    }

    /// Closes the gate at a full budget, opens it a sixteenth below.
    pub(crate) fn follow(&mut self, open: usize, max_flows: usize) {
        let close = if self.closed {
            open + (max_flows / 16).max(1) > max_flows
        } else {
            open >= max_flows
        };
        if close == self.closed {
            return;
        }
        self.closed = close;
        if close && self.drops {
            self.closings += 1;
        }
        let Some(xdp) = &self.xdp else {
            return;
        };
        let switched = xdp.set_closed(close);
        let now = std::time::Instant::now();
        if self
            .logged
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1))
        {
            return;
        }
        self.logged = Some(now);
        match switched {
            Ok(()) if close => info!(
                open,
                max_flows,
                closings = self.closings,
                "flow budget full: new flows' first datagrams now drop in XDP (retries pass)"
            ),
            Ok(()) => info!(open, max_flows, "flow budget has room: XDP gate open"),
            Err(e) => warn!(error = %e, "cannot switch the XDP new-flow gate"),
        }
    }

    /// Whether an XDP gate is closed: a datagram of an unknown flow that
    /// reaches the table now is a retry.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed && self.drops
    }

    /// The XDP program's gate, when there is one (its counts are read
    /// with a system call: outside the table's lock).
    pub(crate) fn xdp(&self) -> Option<Arc<AdmissionGate>> {
        self.xdp.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_at_the_budget_and_opens_a_sixteenth_below() {
        let mut g = FlowGate::simulated();
        g.follow(1599, 1600);
        assert!(!g.is_closed());
        g.follow(1600, 1600);
        assert!(g.is_closed());
        // Still closed until 100 (a sixteenth) are free.
        g.follow(1501, 1600);
        assert!(g.is_closed());
        g.follow(1500, 1600);
        assert!(!g.is_closed());
        g.follow(1600, 1600);
        assert_eq!(g.closings, 2);
    }

    #[test]
    fn a_tiny_budget_still_opens_one_below() {
        let mut g = FlowGate::simulated();
        g.follow(4, 4);
        assert!(g.is_closed());
        g.follow(3, 4);
        assert!(!g.is_closed());
    }

    #[test]
    fn without_an_xdp_gate_nothing_is_taken_for_a_retry() {
        let mut g = FlowGate::new(None);
        g.follow(4, 4);
        assert!(!g.is_closed());
        assert_eq!(g.closings, 0);
    }
}
