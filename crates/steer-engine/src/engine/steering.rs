//! A run-to-completion handler's say in where its flows go: the part of a
//! [`PacketContext`](super::PacketContext) that records a flow's consumer
//! CPU through the desired-CPU table's update rule (the table, policy and
//! counters flow delivery's `Recorder` uses) or pins the flow, as flow
//! delivery's `Flow::pin_to` does.
//!
//! Invariants:
//! - One [`FlowSteering`] per engine, shared by every worker's context
//!   through an `Arc` built at start: a handler that never calls it costs
//!   nothing per packet (the context is built once per worker).
//! - A record goes through [`DesiredCpuTable::record`](steer_core::table::DesiredCpuTable::record)
//!   under the engine's run-time policy, with the worker CPUs as the
//!   consumer's allowed set, and is traced like a flow's read when the
//!   engine records a trace; only worker CPUs are accepted.
//! - Moving a flow this way keeps it in order: the dispatchers move it only
//!   past its `last_qtail`, which the workers publish after the replies of
//!   the packets before it left (see `steer_core::runtime`).

use std::sync::Arc;

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::dispatch::Shared;
use steer_core::flow::{flow_key, AnyHasher, FlowHasher};
use steer_core::policy::RecordOutcome;
use steer_core::table::RecordError;

use crate::trace::TraceSink;

/// Why a handler's record or pin was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlowSteerError {
    /// The context belongs to no engine ([`PacketContext::detached`](super::PacketContext::detached)).
    #[error("this packet context belongs to no engine: nothing to steer")]
    Detached,
    /// No worker runs on that CPU, so no packet would go there.
    #[error("CPU {0} has no worker: give a CPU of the engine's worker set")]
    NotAWorker(CpuId),
    /// The desired-CPU table refused the record (hash 0, CPU out of range).
    #[error("{0}")]
    Table(#[from] RecordError),
}

/// What every worker's context shares to steer flows.
pub(crate) struct FlowSteering {
    shared: Shared,
    hasher: AnyHasher,
    /// The worker CPUs: the consumer's allowed set for the update rule.
    workers: CpuSet,
    trace: Option<Arc<TraceSink>>,
}

impl std::fmt::Debug for FlowSteering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowSteering")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl FlowSteering {
    pub(crate) fn new(
        shared: Shared,
        hasher: AnyHasher,
        workers: CpuSet,
        trace: Option<Arc<TraceSink>>,
    ) -> Self {
        Self {
            shared,
            hasher,
            workers,
            trace,
        }
    }

    /// The hash the dispatchers steer `packet`'s flow by (`None`: no flow).
    pub(crate) fn flow_hash(&self, packet: &[u8]) -> Option<u32> {
        let key = flow_key(packet).ok()??;
        Some(self.hasher.hash(&key))
    }

    fn worker(&self, cpu: CpuId) -> Result<CpuId, FlowSteerError> {
        if self.workers.contains(cpu) {
            Ok(cpu)
        } else {
            Err(FlowSteerError::NotAWorker(cpu))
        }
    }

    /// Flow `hash` is consumed on `cpu`: the update rule decides.
    pub(crate) fn record_on(&self, hash: u32, cpu: CpuId) -> Result<RecordOutcome, FlowSteerError> {
        let cpu = self.worker(cpu)?;
        let outcome = self
            .shared
            .desired
            .record(hash, cpu, &self.workers, &self.shared.layout)?;
        if let Some(trace) = &self.trace {
            trace.consumed(hash, cpu, &self.workers);
        }
        Ok(outcome)
    }

    /// Flow `hash` runs on `cpu` whatever is recorded.
    pub(crate) fn pin(&self, hash: u32, cpu: CpuId) -> Result<(), FlowSteerError> {
        let cpu = self.worker(cpu)?;
        if hash == 0 {
            return Err(RecordError::NoHash.into());
        }
        self.shared.pins.pin_flow(hash, cpu);
        Ok(())
    }

    /// Flow `hash` follows its records again.
    pub(crate) fn unpin(&self, hash: u32) {
        self.shared.pins.unpin_flow(hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer_core::cpu::CpuLayout;
    use steer_core::flow::KeyedHasher;
    use steer_core::packet::build::FrameBuilder;
    use steer_core::policy::{Policy, WriteReason};

    /// 4 CPUs, two per LLC; workers on CPUs 0, 1 and 2.
    fn steering(policy: Policy) -> FlowSteering {
        let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
        let shared = Shared::new(layout, 256, policy).unwrap();
        FlowSteering::new(
            shared,
            KeyedHasher::with_seed(7).into(),
            [0, 1, 2].into_iter().collect(),
            None,
        )
    }

    #[test]
    fn records_go_through_the_update_rule_onto_worker_cpus_only() {
        let s = steering(Policy::LlcAffinity);
        let frame = FrameBuilder::udp([10, 0, 0, 2].into(), [10, 0, 0, 1].into(), 4000, 53).build();
        let hash = s.flow_hash(&frame).unwrap();
        assert_eq!(
            hash,
            KeyedHasher::with_seed(7).hash(&flow_key(&frame).unwrap().unwrap())
        );
        assert_eq!(s.flow_hash(&[0u8; 10]), None, "no flow in a runt");
        assert_eq!(
            s.record_on(hash, 0),
            Ok(RecordOutcome::Written(WriteReason::NewOrOtherFlow))
        );
        // Same LLC: the rule keeps the flow where it is.
        assert_eq!(s.record_on(hash, 1), Ok(RecordOutcome::Suppressed));
        assert_eq!(s.shared.desired.lookup(hash), Some(0));
        // Across the LLC boundary: written.
        assert_eq!(
            s.record_on(hash, 2),
            Ok(RecordOutcome::Written(WriteReason::CrossLlc))
        );
        assert_eq!(s.shared.desired.lookup(hash), Some(2));
        assert_eq!(s.record_on(hash, 3), Err(FlowSteerError::NotAWorker(3)));
        assert_eq!(
            s.record_on(0, 1),
            Err(FlowSteerError::Table(RecordError::NoHash))
        );
    }

    #[test]
    fn pins_override_records_until_unpinned() {
        let s = steering(Policy::Always);
        let mut reader = s.shared.pins.reader();
        s.pin(0xabcd, 2).unwrap();
        reader.refresh();
        assert_eq!(reader.lookup(0xabcd, 0), Some(2));
        assert_eq!(s.pin(0xabcd, 3), Err(FlowSteerError::NotAWorker(3)));
        assert_eq!(s.pin(0, 1), Err(FlowSteerError::Table(RecordError::NoHash)));
        s.unpin(0xabcd);
        reader.refresh();
        assert_eq!(reader.lookup(0xabcd, 0), None);
    }
}
