//! The LLC-affinity update rule, end to end through `DesiredCpuTable::record`:
//! one named test per rule, and one per flaw of the posted kernel patch
//! ("net: reduce RFS/ARFS flow updates by checking LLC affinity", v2) showing
//! that the patch's logic would give a different answer.

use steer_core::cpu::{CpuLayout, CpuSet};
use steer_core::policy::Policy;
use steer_core::policy::RecordOutcome::{self, Suppressed, Unchanged, Written};
use steer_core::policy::WriteReason::{
    Changed, CrossLlc, ForcedAffinity, ForcedOffline, NewOrOtherFlow,
};
use steer_core::table::{DesiredCpuTable, SlotCodec};

/// 16 CPUs, LLCs {0-7} and {8-15}.
fn layout() -> CpuLayout {
    CpuLayout::uniform(16, 8).unwrap()
}

fn all() -> CpuSet {
    CpuSet::first(16)
}

fn table(policy: Policy) -> DesiredCpuTable {
    DesiredCpuTable::with_policy(1024, 16, policy).unwrap()
}

/// A flow hash with plenty of high bits set, as real hashes have.
const FLOW: u32 = 0xc0ff_ee15;

/// Which version of the posted patch [`patch_v2_cond`] models.
#[derive(Clone, Copy)]
enum Patch {
    /// As posted: old and new CPU taken with `& !cpu_mask` (flaw 1: the
    /// hash bits).
    AsPosted,
    /// Flaw 1 fixed (CPU bits taken with `& cpu_mask`), flaw 2 kept: it
    /// still never looks at whose flow the slot holds.
    MaskFixed,
}

/// A model of the posted patch's `rps_record_cond`, written from its
/// description; no version checks whose flow the slot holds (flaw 2).
/// `true` means "write".
fn patch_v2_cond(
    patch: Patch,
    (old_val, new_val): (u32, u32),
    cpu_mask: u32,
    allowed: &CpuSet,
    l: &CpuLayout,
) -> bool {
    let cpu_bits = match patch {
        Patch::AsPosted => !cpu_mask,
        Patch::MaskFixed => cpu_mask,
    };
    let old_cpu = (old_val & cpu_bits) as usize;
    let new_cpu = (new_val & cpu_bits) as usize;
    if old_val == new_val {
        return false;
    }
    if old_cpu >= l.nr_cpus() || !l.is_online(old_cpu) {
        return true;
    }
    if !allowed.contains(old_cpu) {
        return true;
    }
    !l.shares_llc(old_cpu, new_cpu)
}

/// `FLOW` recorded on `cpu` with every CPU allowed.
fn rec(t: &DesiredCpuTable, l: &CpuLayout, cpu: usize) -> RecordOutcome {
    t.record(FLOW, cpu, &all(), l).unwrap()
}

/// A fresh layout and table under `policy`, `FLOW` already recorded on `cpu`.
fn placed(policy: Policy, cpu: usize) -> (CpuLayout, DesiredCpuTable) {
    let (l, t) = (layout(), table(policy));
    rec(&t, &l, cpu);
    (l, t)
}

/// `FLOW` placed on `from` under `policy`, then recorded on `to`: the
/// outcome, and the CPU the table holds for it then.
fn moved(policy: Policy, from: usize, to: usize) -> (RecordOutcome, Option<usize>) {
    let (l, t) = placed(policy, from);
    (rec(&t, &l, to), t.lookup(FLOW))
}

#[test]
fn always_writes_every_same_flow_change() {
    assert_eq!(moved(Policy::Always, 1, 2), (Written(Changed), Some(2)));
}

#[test]
fn same_cpu_writes_nothing() {
    for p in [Policy::Always, Policy::LlcAffinity] {
        let (l, t) = placed(p, 3);
        assert_eq!(rec(&t, &l, 3), Unchanged);
        assert_eq!(t.stats().updates(), 1);
        assert_eq!(t.stats().suppressed, 0);
    }
}

#[test]
fn llc_suppresses_intra_llc_move() {
    let (l, t) = placed(Policy::LlcAffinity, 1);
    assert_eq!(rec(&t, &l, 6), Suppressed);
    assert_eq!(t.lookup(FLOW), Some(1));
    assert_eq!(t.stats().suppressed, 1);
}

#[test]
fn llc_writes_cross_llc_move() {
    assert_eq!(
        moved(Policy::LlcAffinity, 1, 9),
        (Written(CrossLlc), Some(9))
    );
}

#[test]
fn llc_forced_when_old_cpu_offline() {
    let (l, t) = placed(Policy::LlcAffinity, 1);
    l.set_online(1, false);
    assert_eq!(rec(&t, &l, 2), Written(ForcedOffline));
    assert_eq!(t.lookup(FLOW), Some(2));
}

#[test]
fn llc_forced_when_thread_no_longer_allowed_on_old_cpu() {
    let (l, t) = placed(Policy::LlcAffinity, 1);
    let allowed: CpuSet = "2-7".parse().unwrap();
    assert_eq!(
        t.record(FLOW, 2, &allowed, &l).unwrap(),
        Written(ForcedAffinity)
    );
}

#[test]
fn llc_reasons_apply_in_patch_order() {
    // Old CPU 1 offline AND not allowed AND the move crosses LLCs: offline.
    let (l, t) = placed(Policy::LlcAffinity, 1);
    l.set_online(1, false);
    let allowed: CpuSet = "8-15".parse().unwrap();
    assert_eq!(
        t.record(FLOW, 9, &allowed, &l).unwrap(),
        Written(ForcedOffline)
    );
    // Old CPU 9 online but not allowed, and the move crosses LLCs: affinity.
    let allowed: CpuSet = "0-7".parse().unwrap();
    assert_eq!(
        t.record(FLOW, 2, &allowed, &l).unwrap(),
        Written(ForcedAffinity)
    );
    let s = t.stats();
    assert_eq!(s.written(ForcedOffline), 1);
    assert_eq!(s.written(ForcedAffinity), 1);
    assert_eq!(s.written(CrossLlc), 0);
}

#[test]
fn empty_slot_always_written() {
    for p in [Policy::Always, Policy::LlcAffinity] {
        let (l, t) = (layout(), table(p));
        assert_eq!(rec(&t, &l, 4), Written(NewOrOtherFlow));
    }
}

#[test]
fn other_flows_slot_always_written() {
    let (l, t) = (layout(), table(Policy::LlcAffinity));
    let other = FLOW ^ 0x8000_0000; // same slot, different hash bits
    t.record(other, 1, &all(), &l).unwrap();
    assert_eq!(rec(&t, &l, 2), Written(NewOrOtherFlow));
    assert_eq!(t.lookup(FLOW), Some(2));
    assert_eq!(t.lookup(other), None);
}

#[test]
fn policy_switch_takes_effect_at_run_time() {
    let (l, t) = placed(Policy::LlcAffinity, 1);
    assert_eq!(rec(&t, &l, 2), Suppressed);
    t.policy().set(Policy::Always);
    assert_eq!(rec(&t, &l, 2), Written(Changed));
}

/// Flaw 1: the patch takes the old CPU as `old_val & ~mask`, i.e. the hash
/// bits, which is (almost always) an out-of-range "CPU", so it forces every
/// write and the intra-LLC suppression never happens.
#[test]
fn flaw1_old_cpu_is_the_cpu_bits_not_the_hash_bits() {
    let (l, t) = (layout(), table(Policy::LlcAffinity));
    let mask = t.codec().cpu_mask();
    t.record(FLOW, 1, &all(), &l).unwrap();
    let old_val = t.raw_entry(FLOW);
    let new_val = t.codec().encode(FLOW, 6);
    // The patch would write (old "CPU" = hash bits = invalid).
    assert!(patch_v2_cond(
        Patch::AsPosted,
        (old_val, new_val),
        mask,
        &all(),
        &l
    ));
    // We suppress: CPU 1 is online, allowed, and shares CPU 6's LLC.
    assert_eq!(rec(&t, &l, 6), Suppressed);
}

/// Flaw 2: the patch suppresses a write into a slot held by *another* flow
/// whose CPU shares the new CPU's LLC, so the new flow is never recorded.
#[test]
fn flaw2_other_flows_slot_is_not_suppressed() {
    let (l, t) = (layout(), table(Policy::LlcAffinity));
    let mask = t.codec().cpu_mask();
    let other = FLOW ^ 0x4000_0000;
    t.record(other, 1, &all(), &l).unwrap();
    let old_val = t.raw_entry(FLOW);
    let new_val = t.codec().encode(FLOW, 2);
    // Even with flaw 1 fixed, the patch would not write.
    assert!(!patch_v2_cond(
        Patch::MaskFixed,
        (old_val, new_val),
        mask,
        &all(),
        &l
    ));
    assert_eq!(rec(&t, &l, 2), Written(NewOrOtherFlow));
    assert_eq!(t.lookup(FLOW), Some(2));
}

/// Flaw 2, empty slot: in the kernel's encoding an empty slot reads as
/// `RPS_NO_CPU` (0xffff), whose CPU bits are a valid CPU on a machine with a
/// power-of-two CPU count; the patch then suppresses recording a new flow on
/// a CPU sharing that CPU's LLC.
#[test]
fn flaw2_empty_slot_is_not_suppressed() {
    let l = layout();
    let kernel_mask = 15; // roundup_pow_of_two(16) - 1
    let rps_no_cpu = 0xffff;
    let new_val = (FLOW & !kernel_mask) | 14;
    // CPU bits of RPS_NO_CPU = 15: online, allowed, same LLC as 14.
    assert!(!patch_v2_cond(
        Patch::MaskFixed,
        (rps_no_cpu, new_val),
        kernel_mask,
        &all(),
        &l
    ));
    let t = table(Policy::LlcAffinity);
    assert_eq!(t.raw_entry(FLOW), SlotCodec::EMPTY);
    assert_eq!(rec(&t, &l, 14), Written(NewOrOtherFlow));
    assert_eq!(t.lookup(FLOW), Some(14));
}
