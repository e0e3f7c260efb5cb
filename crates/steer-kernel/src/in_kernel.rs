//! Forgetting the flows the in-kernel recorder made once they go idle.
//!
//! The recorder (transparent mode) creates a flow's state and desired CPU
//! in the RFS program's maps the first time an application reads it; no
//! handle is dropped when the connection closes, so the sweeper forgets
//! them: a flow whose frame count (`seen`) did not move for `idle_sweeps`
//! sweeps in a row is deleted from both maps and takes the kernel path
//! again (a later read records it afresh). Flows the user-space hook
//! placed are its own to expire and are left alone.
//!
//! Invariant: the sweep's memory holds only flows the last walk saw, so
//! it never outgrows the maps.

use std::collections::HashMap;

use steer_xdp::FlowMapKey;

/// What the sweeper remembers of each recorded flow between sweeps.
#[derive(Debug, Default)]
pub(crate) struct IdleSweep {
    /// Frames seen at the last sweep, and sweeps in a row without a frame.
    flows: HashMap<FlowMapKey, (u64, u32)>,
}

impl IdleSweep {
    /// One sweep over the tracked flows (`(flow, frames seen)`): returns
    /// those idle for `idle_sweeps` sweeps in a row, to forget.
    pub(crate) fn idle(
        &mut self,
        tracked: impl IntoIterator<Item = (FlowMapKey, u64)>,
        idle_sweeps: u32,
    ) -> Vec<FlowMapKey> {
        let mut next = HashMap::with_capacity(self.flows.len());
        let mut idle = Vec::new();
        for (flow, seen) in tracked {
            let quiet = match self.flows.get(&flow) {
                Some(&(before, quiet)) if before == seen => quiet + 1,
                _ => 0,
            };
            if quiet >= idle_sweeps.max(1) {
                idle.push(flow);
            } else {
                next.insert(flow, (seen, quiet));
            }
        }
        self.flows = next;
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer_xdp::Proto;

    fn flow(port: u16) -> FlowMapKey {
        FlowMapKey::new(
            Proto::Tcp,
            format!("10.0.0.2:{port}").parse().unwrap(),
            "10.0.0.1:5201".parse().unwrap(),
        )
    }

    #[test]
    fn a_flow_is_forgotten_after_idle_sweeps_without_a_frame_and_not_before() {
        let mut s = IdleSweep::default();
        let (busy, quiet) = (flow(1), flow(2));
        for round in 0..3u64 {
            let out = s.idle([(busy, round * 10), (quiet, 5)], 3);
            assert!(out.is_empty(), "round {round}: {out:?}");
        }
        // The third sweep in a row without a frame for `quiet`.
        assert_eq!(s.idle([(busy, 40), (quiet, 5)], 3), vec![quiet]);
        // Forgotten flows leave the sweep's memory; a flow the walk no
        // longer sees does too.
        assert_eq!(s.flows.len(), 1);
        assert!(s.idle([], 3).is_empty());
        assert!(s.flows.is_empty());
    }
}
