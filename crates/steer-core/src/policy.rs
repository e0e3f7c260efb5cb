//! The update rule for the desired-CPU table: when does a consuming thread's
//! `record(hash, cpu)` actually rewrite the flow's entry?
//!
//! Two policies, switchable at run time through a [`PolicySwitch`] (the
//! analog of the proposed `net.core.rps_feat_llc_affinity` sysctl):
//!
//! - [`Policy::Always`]: every change is written (the kernel today).
//! - [`Policy::LlcAffinity`]: a change of CPU *for the same flow* is written
//!   only when, checked in this order (the posted patch's order), the old CPU
//!   is invalid or offline ([`WriteReason::ForcedOffline`]), the consuming
//!   thread may no longer run on the old CPU ([`WriteReason::ForcedAffinity`]),
//!   or the old and new CPUs do not share a last-level cache
//!   ([`WriteReason::CrossLlc`]). Otherwise the write is
//!   [`RecordOutcome::Suppressed`]: the flow stays steered to a CPU whose cache
//!   the consumer still shares, and no steering update (hardware filter, BPF
//!   map write) follows.
//!
//! Invariants, under both policies:
//! - An empty slot, or a slot held by a *different* flow, is always written
//!   ([`WriteReason::NewOrOtherFlow`]). The posted patch suppresses these too,
//!   so a new flow whose slot holds a neighbour's CPU behind the same LLC
//!   would never be recorded; we do not copy that.
//! - The old CPU is the entry's CPU bits (`old & cpu_mask`), never its hash
//!   bits (`old & !cpu_mask`, the patch's slip, which makes every old CPU look
//!   invalid so nothing is ever suppressed).
//! - A record that finds its own flow already on the same CPU writes nothing
//!   ([`RecordOutcome::Unchanged`]).
//!
//! This module decides; [`crate::table::DesiredCpuTable::record`] reads the
//! slot, asks [`decide`], and stores. No `unsafe`, no I/O.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::cpu::{CpuId, CpuLayout, CpuSet};

/// Which update rule `record` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// Write every change of CPU (the kernel's behaviour without the patch).
    #[default]
    Always,
    /// Write a same-flow change of CPU only when forced or when it crosses an
    /// LLC boundary.
    LlcAffinity,
}

impl Policy {
    /// The short name used on command lines and in reports: `always`, `llc`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::LlcAffinity => "llc",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error from parsing a [`Policy`] name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown policy {:?}: expected `always` or `llc`", self.0)
    }
}

impl std::error::Error for UnknownPolicy {}

impl std::str::FromStr for Policy {
    type Err = UnknownPolicy;

    /// Accepts `always`, and `llc` or `llc-affinity`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Self::Always),
            "llc" | "llc-affinity" | "llc_affinity" => Ok(Self::LlcAffinity),
            other => Err(UnknownPolicy(other.to_string())),
        }
    }
}

/// A run-time toggle for the policy, read on every `record` with one relaxed
/// load (like a sysctl: a change takes effect for later records; a record
/// racing with the switch may use either policy, which is harmless since the
/// table is only a hint).
///
/// ```
/// use steer_core::policy::{Policy, PolicySwitch};
/// let switch = PolicySwitch::new(Policy::Always);
/// switch.set(Policy::LlcAffinity);
/// assert_eq!(switch.get(), Policy::LlcAffinity);
/// ```
#[derive(Debug, Default)]
#[doc(alias = "rps_feat_llc_affinity")]
pub struct PolicySwitch(AtomicU8);

impl PolicySwitch {
    /// A switch starting at `policy`.
    pub const fn new(policy: Policy) -> Self {
        Self(AtomicU8::new(Self::encode(policy)))
    }

    const fn encode(policy: Policy) -> u8 {
        match policy {
            Policy::Always => 0,
            Policy::LlcAffinity => 1,
        }
    }

    /// The current policy.
    #[inline]
    pub fn get(&self) -> Policy {
        match self.0.load(Ordering::Relaxed) {
            0 => Policy::Always,
            _ => Policy::LlcAffinity,
        }
    }

    /// Switches the policy for later records.
    pub fn set(&self, policy: Policy) {
        self.0.store(Self::encode(policy), Ordering::Relaxed);
    }
}

/// Why a record wrote its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteReason {
    /// The slot was empty or held by another flow: always written.
    NewOrOtherFlow,
    /// Same flow, new CPU, under [`Policy::Always`].
    Changed,
    /// [`Policy::LlcAffinity`]: the old CPU is invalid or offline.
    ForcedOffline,
    /// [`Policy::LlcAffinity`]: the consumer may no longer run on the old CPU.
    ForcedAffinity,
    /// [`Policy::LlcAffinity`]: old and new CPUs do not share an LLC.
    CrossLlc,
}

impl WriteReason {
    /// All reasons, in the order the rule checks them.
    pub const ALL: [Self; 5] = [
        Self::NewOrOtherFlow,
        Self::Changed,
        Self::ForcedOffline,
        Self::ForcedAffinity,
        Self::CrossLlc,
    ];

    /// Snake-case name used in reports (`new_or_other_flow`, `cross_llc`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::NewOrOtherFlow => "new_or_other_flow",
            Self::Changed => "changed",
            Self::ForcedOffline => "forced_offline",
            Self::ForcedAffinity => "forced_affinity",
            Self::CrossLlc => "cross_llc",
        }
    }
}

impl fmt::Display for WriteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordOutcome {
    /// The entry was written, for this reason.
    Written(WriteReason),
    /// The flow was already recorded on this CPU: nothing written.
    Unchanged,
    /// Same flow, different CPU, but the rule kept the old CPU (same LLC,
    /// old CPU online and allowed).
    Suppressed,
}

impl RecordOutcome {
    /// Whether the entry was written.
    pub fn wrote(self) -> bool {
        matches!(self, Self::Written(_))
    }
}

/// What a slot of the desired-CPU table held before a record, as seen by the
/// recording flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldSlot {
    /// The empty marker.
    Empty,
    /// A different flow (its hash bits do not match).
    OtherFlow,
    /// This flow, recorded on this CPU id (which may be out of range if the
    /// entry was corrupted or the table outlived a layout).
    SameFlow(CpuId),
}

/// The update rule: what `record(new_cpu)` should do to a slot that held
/// `old`, for a consumer allowed on `allowed`, under `policy`.
///
/// Pure; the table calls it between its load and its store.
///
/// ```
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::policy::{decide, OldSlot, Policy, RecordOutcome, WriteReason};
/// let layout = CpuLayout::uniform(8, 4).unwrap(); // LLCs {0-3}, {4-7}
/// let all = CpuSet::first(8);
/// let llc = Policy::LlcAffinity;
/// assert_eq!(decide(llc, OldSlot::SameFlow(1), 2, &all, &layout), RecordOutcome::Suppressed);
/// assert_eq!(
///     decide(llc, OldSlot::SameFlow(1), 5, &all, &layout),
///     RecordOutcome::Written(WriteReason::CrossLlc)
/// );
/// assert_eq!(
///     decide(llc, OldSlot::OtherFlow, 2, &all, &layout),
///     RecordOutcome::Written(WriteReason::NewOrOtherFlow)
/// );
/// ```
#[inline]
pub fn decide(
    policy: Policy,
    old: OldSlot,
    new_cpu: CpuId,
    allowed: &CpuSet,
    layout: &CpuLayout,
) -> RecordOutcome {
    let old_cpu = match old {
        OldSlot::Empty | OldSlot::OtherFlow => {
            return RecordOutcome::Written(WriteReason::NewOrOtherFlow)
        }
        OldSlot::SameFlow(cpu) if cpu == new_cpu => return RecordOutcome::Unchanged,
        OldSlot::SameFlow(cpu) => cpu,
    };
    match policy {
        Policy::Always => RecordOutcome::Written(WriteReason::Changed),
        Policy::LlcAffinity => {
            if !layout.is_online(old_cpu) {
                RecordOutcome::Written(WriteReason::ForcedOffline)
            } else if !allowed.contains(old_cpu) {
                RecordOutcome::Written(WriteReason::ForcedAffinity)
            } else if !layout.shares_llc(old_cpu, new_cpu) {
                RecordOutcome::Written(WriteReason::CrossLlc)
            } else {
                RecordOutcome::Suppressed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> CpuLayout {
        // 8 CPUs, LLCs {0-3} and {4-7}.
        CpuLayout::uniform(8, 4).unwrap()
    }

    #[test]
    fn policy_names_round_trip() {
        for p in [Policy::Always, Policy::LlcAffinity] {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
        }
        assert!("sometimes".parse::<Policy>().is_err());
    }

    #[test]
    fn switch_toggles_at_run_time() {
        let s = PolicySwitch::default();
        assert_eq!(s.get(), Policy::Always);
        s.set(Policy::LlcAffinity);
        assert_eq!(s.get(), Policy::LlcAffinity);
        s.set(Policy::Always);
        assert_eq!(s.get(), Policy::Always);
    }

    #[test]
    fn same_cpu_is_unchanged_under_both() {
        let l = layout();
        let all = CpuSet::first(8);
        for p in [Policy::Always, Policy::LlcAffinity] {
            assert_eq!(
                decide(p, OldSlot::SameFlow(3), 3, &all, &l),
                RecordOutcome::Unchanged
            );
        }
    }

    #[test]
    fn always_writes_every_change() {
        let l = layout();
        let all = CpuSet::first(8);
        assert_eq!(
            decide(Policy::Always, OldSlot::SameFlow(1), 2, &all, &l),
            RecordOutcome::Written(WriteReason::Changed)
        );
    }

    #[test]
    fn forced_offline_comes_first() {
        let l = layout();
        l.set_online(1, false);
        // Offline old CPU, also not allowed, also cross-LLC target: offline wins.
        let allowed: CpuSet = "4-7".parse().unwrap();
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(1), 5, &allowed, &l),
            RecordOutcome::Written(WriteReason::ForcedOffline)
        );
        // An out-of-range old CPU counts as invalid.
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(99), 2, &allowed, &l),
            RecordOutcome::Written(WriteReason::ForcedOffline)
        );
    }

    #[test]
    fn forced_affinity_before_cross_llc() {
        let l = layout();
        let allowed: CpuSet = "2-7".parse().unwrap();
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(1), 5, &allowed, &l),
            RecordOutcome::Written(WriteReason::ForcedAffinity)
        );
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(1), 2, &allowed, &l),
            RecordOutcome::Written(WriteReason::ForcedAffinity)
        );
    }

    #[test]
    fn cross_llc_written_intra_llc_suppressed() {
        let l = layout();
        let all = CpuSet::first(8);
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(3), 4, &all, &l),
            RecordOutcome::Written(WriteReason::CrossLlc)
        );
        assert_eq!(
            decide(Policy::LlcAffinity, OldSlot::SameFlow(3), 0, &all, &l),
            RecordOutcome::Suppressed
        );
    }

    #[test]
    fn empty_and_other_flow_always_written() {
        let l = layout();
        let all = CpuSet::first(8);
        for p in [Policy::Always, Policy::LlcAffinity] {
            for old in [OldSlot::Empty, OldSlot::OtherFlow] {
                assert_eq!(
                    decide(p, old, 2, &all, &l),
                    RecordOutcome::Written(WriteReason::NewOrOtherFlow)
                );
            }
        }
    }
}
