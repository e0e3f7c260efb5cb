//! The steering hook: what happens outside steer when an rx-queue flow table
//! moves a flow to another CPU (the kernel's `ndo_rx_flow_steer`).
//!
//! A hook may install a hardware ntuple rule so the NIC delivers the flow to
//! the queue nearest its new CPU, update a BPF map, or do nothing. It answers
//! with the id of the state it holds for the flow (a [`FilterId`]), which the
//! rx-queue table keeps so that the state can be removed when the flow goes
//! idle. Removal happens only from the table's sweep
//! ([`crate::table::RxFlowTable::sweep`], the `rps_may_expire_flow` analog),
//! never on the per-packet path.
//!
//! Invariants:
//! - [`SteerHook::steer`] is called once per move of a flow (including its
//!   first placement), on the dispatcher thread owning the table; a failure
//!   leaves the software steering in place (the flow still moves) and is
//!   counted.
//! - [`SteerHook::remove`] is called once per filter id the hook handed out
//!   and the table still held when the entry expired.

use std::fmt;

use crate::cpu::CpuId;
use crate::flow::FlowKey;

/// Identifies the state a hook holds for one flow (a hardware rule id, a BPF
/// map key, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FilterId(pub u32);

/// A flow being moved by an rx-queue table (or, for kernel sockets, by a
/// desired-table write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowMove {
    /// The rx queue whose table moves the flow (0 where there is none, as
    /// for kernel sockets).
    pub rxq: u32,
    /// The bucket of the rx-queue table (the kernel's `flow_id`).
    pub bucket: usize,
    /// The flow hash.
    pub hash: u32,
    /// The flow's key (addresses, protocol, ports) when the mover knows it:
    /// what a hook needs to install a rule for exactly this flow (an ntuple
    /// filter, a map entry keyed by the 4-tuple).
    pub key: Option<FlowKey>,
    /// The CPU that served the flow, if any.
    pub from: Option<CpuId>,
    /// The CPU that serves it from now on.
    pub to: CpuId,
    /// The filter this bucket already holds, which the hook may update in
    /// place.
    pub filter: Option<FilterId>,
}

/// Why a hook could not steer a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookError {
    /// The backend cannot steer (no ntuple support, no map).
    Unsupported,
    /// The backend has no room for another rule.
    Full,
    /// The backend failed with this errno.
    Os(i32),
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str("flow steering is not supported by this backend"),
            Self::Full => f.write_str("the flow steering backend is full"),
            Self::Os(errno) => write!(f, "flow steering failed with errno {errno}"),
        }
    }
}

impl std::error::Error for HookError {}

/// Called by an rx-queue flow table when it moves a flow, and by its sweep
/// when an idle flow's state expires.
#[doc(alias = "ndo_rx_flow_steer")]
pub trait SteerHook {
    /// Steer `mv.hash` towards `mv.to`. Returns the filter now in force for
    /// the bucket, `Ok(None)` when the hook keeps no state.
    #[doc(alias = "ndo_rx_flow_steer")]
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError>;

    /// Drop the state `filter` of bucket `bucket` of rx queue `rxq` (the flow
    /// went idle).
    fn remove(&mut self, rxq: u32, bucket: usize, filter: FilterId);
}

/// A boxed hook is a hook: an engine can take any backend chosen at run
/// time (`Box<dyn SteerHook + Send>`).
impl<H: SteerHook + ?Sized> SteerHook for Box<H> {
    #[inline]
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        (**self).steer(mv)
    }

    #[inline]
    fn remove(&mut self, rxq: u32, bucket: usize, filter: FilterId) {
        (**self).remove(rxq, bucket, filter)
    }
}

/// A hook that does nothing and keeps no state (software steering only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoopHook;

impl SteerHook for NoopHook {
    #[inline]
    fn steer(&mut self, _mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        Ok(None)
    }

    #[inline]
    fn remove(&mut self, _rxq: u32, _bucket: usize, _filter: FilterId) {}
}

/// A hook that only counts its calls and hands out a fresh filter id per new
/// flow (updating an existing one in place): allocation-free, for benches and
/// long what-if runs where [`RecordingHook`]'s log would grow without bound.
///
/// ```
/// use steer_core::hook::{CountingHook, FilterId, FlowMove, SteerHook};
/// let mut hook = CountingHook::default();
/// let mv = FlowMove { rxq: 0, bucket: 1, hash: 9, key: None, from: None, to: 2, filter: None };
/// assert_eq!(hook.steer(&mv), Ok(Some(FilterId(0))));
/// hook.remove(0, 1, FilterId(0));
/// assert_eq!((hook.steers, hook.removes, hook.live()), (1, 1, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountingHook {
    /// `steer` calls so far.
    pub steers: u64,
    /// `remove` calls so far.
    pub removes: u64,
    next_id: u32,
    live: u64,
}

impl CountingHook {
    /// Filters handed out and not yet removed.
    pub fn live(&self) -> u64 {
        self.live
    }
}

impl SteerHook for CountingHook {
    #[inline]
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        self.steers += 1;
        Ok(Some(mv.filter.unwrap_or_else(|| {
            let id = FilterId(self.next_id);
            self.next_id = self.next_id.wrapping_add(1);
            self.live += 1;
            id
        })))
    }

    #[inline]
    fn remove(&mut self, _rxq: u32, _bucket: usize, _filter: FilterId) {
        self.removes += 1;
        self.live = self.live.saturating_sub(1);
    }
}

/// One call seen by a [`RecordingHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    /// A `steer` call and what it answered.
    Steer(FlowMove, Result<Option<FilterId>, HookError>),
    /// A `remove` call.
    Remove {
        /// The rx queue.
        rxq: u32,
        /// The bucket.
        bucket: usize,
        /// The filter removed.
        filter: FilterId,
    },
}

/// A hook for tests and what-if runs: hands out fresh filter ids (or the
/// bucket's existing one, updated in place), can be told to fail, and records
/// every call.
///
/// ```
/// use steer_core::hook::{FilterId, FlowMove, RecordingHook, SteerHook};
/// let mut hook = RecordingHook::default();
/// let mv = FlowMove { rxq: 0, bucket: 3, hash: 7, key: None, from: None, to: 1, filter: None };
/// assert_eq!(hook.steer(&mv).unwrap(), Some(FilterId(0)));
/// hook.remove(0, 3, FilterId(0));
/// assert_eq!((hook.steer_calls(), hook.remove_calls()), (1, 1));
/// assert!(hook.live_filters().is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct RecordingHook {
    events: Vec<HookEvent>,
    next_id: u32,
    live: Vec<FilterId>,
    /// When set, every `steer` call fails with this error.
    pub fail_with: Option<HookError>,
}

impl RecordingHook {
    /// Every call so far, in order.
    pub fn events(&self) -> &[HookEvent] {
        &self.events
    }

    /// Number of `steer` calls.
    pub fn steer_calls(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, HookEvent::Steer(..)))
            .count()
    }

    /// Number of `remove` calls.
    pub fn remove_calls(&self) -> usize {
        self.events.len() - self.steer_calls()
    }

    /// Filters handed out and not yet removed, ascending.
    pub fn live_filters(&self) -> &[FilterId] {
        &self.live
    }
}

impl SteerHook for RecordingHook {
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        let answer = match (self.fail_with, mv.filter) {
            (Some(err), _) => Err(err),
            (None, Some(existing)) => Ok(Some(existing)),
            (None, None) => {
                let id = FilterId(self.next_id);
                self.next_id = self.next_id.wrapping_add(1);
                self.live.push(id);
                Ok(Some(id))
            }
        };
        self.events.push(HookEvent::Steer(*mv, answer));
        answer
    }

    fn remove(&mut self, rxq: u32, bucket: usize, filter: FilterId) {
        self.live.retain(|&f| f != filter);
        self.events.push(HookEvent::Remove {
            rxq,
            bucket,
            filter,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(filter: Option<FilterId>) -> FlowMove {
        FlowMove {
            rxq: 1,
            bucket: 9,
            hash: 0xabc,
            key: None,
            from: Some(0),
            to: 2,
            filter,
        }
    }

    #[test]
    fn noop_keeps_no_state() {
        assert_eq!(NoopHook.steer(&mv(None)), Ok(None));
    }

    #[test]
    fn boxed_hooks_forward() {
        let mut boxed: Box<dyn SteerHook + Send> = Box::new(CountingHook::default());
        assert_eq!(boxed.steer(&mv(None)), Ok(Some(FilterId(0))));
        boxed.remove(1, 9, FilterId(0));
        let mut recording: Box<RecordingHook> = Box::default();
        recording.steer(&mv(None)).unwrap();
        assert_eq!(recording.steer_calls(), 1);
    }

    #[test]
    fn recording_hook_updates_in_place_and_fails_on_demand() {
        let mut h = RecordingHook::default();
        assert_eq!(h.steer(&mv(None)), Ok(Some(FilterId(0))));
        assert_eq!(h.steer(&mv(Some(FilterId(0)))), Ok(Some(FilterId(0))));
        assert_eq!(h.steer(&mv(None)), Ok(Some(FilterId(1))));
        h.fail_with = Some(HookError::Full);
        assert_eq!(h.steer(&mv(None)), Err(HookError::Full));
        assert_eq!(h.steer_calls(), 4);
        assert_eq!(h.live_filters(), &[FilterId(0), FilterId(1)]);
        h.remove(1, 9, FilterId(0));
        assert_eq!(h.live_filters(), &[FilterId(1)]);
        assert_eq!(h.remove_calls(), 1);
        assert_eq!(
            HookError::Os(16).to_string(),
            "flow steering failed with errno 16"
        );
    }
}
