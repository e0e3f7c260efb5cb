//! The desired-CPU table: for each flow, the CPU its consumer last ran on
//! (the kernel's `rps_sock_flow_table`).
//!
//! Layout: a power-of-two array of atomic `u32` entries indexed by
//! `hash & (entries - 1)`. An entry packs the flow hash's high bits with a CPU
//! index exactly as the kernel does, `val = (hash & !cpu_mask) | cpu`, and
//! [`SlotCodec::EMPTY`] (`u32::MAX`) marks a slot with no CPU.
//!
//! Invariants:
//! - `cpu_mask` is all ones and strictly greater than every CPU id
//!   (`(nr_cpus + 1).next_power_of_two() - 1`): it covers the CPU ids, and the
//!   all-ones CPU field is never a CPU, so the empty marker cannot be mistaken
//!   for a record. (The kernel uses `roundup_pow_of_two(nr_cpu_ids) - 1` and
//!   tolerates the rare alias of its `RPS_NO_CPU`; we spend one more hash bit,
//!   only when `nr_cpus` is a power of two, to rule the alias out.)
//! - `lookup` ignores an entry whose hash bits (`!cpu_mask`) differ from the
//!   looked-up hash: a slot held by another flow is not a hint for this one.
//!   Flows that agree on the index bits and on the bits above `cpu_mask`
//!   alias, as in the kernel (only when `entries <= cpu_mask`).
//! - Flow hash 0 means "no hash": never recorded, never found.
//! - Entries are hints. `record` is a load, a decision ([`crate::policy`]) and
//!   a store, not a compare-and-swap: racing recorders of one slot may
//!   overwrite each other and the last store wins, as with the kernel's
//!   `READ_ONCE`/`WRITE_ONCE` pair. Relaxed ordering suffices because an
//!   entry is one self-contained word and nothing else is published with it.
//!
//! Cache discipline: the read-mostly header (masks, entry pointer, policy) is
//! what every dispatcher `lookup` touches; the record counters, bumped by
//! application threads on every write or suppression, live elsewhere, one
//! [`CachePadded`] block per recording CPU, so they never invalidate the
//! header and threads on different CPUs never contend on them (under
//! `LlcAffinity` with intra-LLC churn nearly every record is a suppression:
//! one shared counter would turn the saved entry writes into counter
//! writes). A record that finds its flow already on the same CPU writes
//! neither entry nor counter.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::cpu::{CpuId, CpuLayout, CpuSet, MAX_CPUS};
use crate::policy::{decide, OldSlot, Policy, PolicySwitch, RecordOutcome, WriteReason};

/// Largest number of entries a table may have (2^28, 1 GiB of entries).
pub const MAX_ENTRIES: usize = 1 << 28;

/// Error from building a flow table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// The entry count is zero, not a power of two, or above [`MAX_ENTRIES`].
    BadSize(usize),
    /// The CPU count is zero or above [`MAX_CPUS`].
    BadCpuCount(usize),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSize(n) => write!(
                f,
                "flow table size {n} must be a power of two between 1 and {MAX_ENTRIES}"
            ),
            Self::BadCpuCount(n) => write!(f, "CPU count {n} must be between 1 and {MAX_CPUS}"),
        }
    }
}

impl std::error::Error for TableError {}

/// Error from [`DesiredCpuTable::record`]; the table is left untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Flow hash 0 means "no hash" and cannot be recorded.
    NoHash,
    /// The CPU id does not fit the table (`cpu >= nr_cpus`).
    CpuOutOfRange {
        /// The CPU given.
        cpu: CpuId,
        /// The table's CPU count.
        nr_cpus: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoHash => f.write_str("flow hash 0 (no hash) cannot be recorded"),
            Self::CpuOutOfRange { cpu, nr_cpus } => {
                write!(f, "CPU {cpu} is out of range for a table of {nr_cpus} CPUs")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// Packs and unpacks desired-table entries for a given CPU count.
///
/// Public so benches and tools can build alternative layouts with exactly the
/// table's encoding.
///
/// ```
/// use steer_core::table::SlotCodec;
/// let codec = SlotCodec::new(256).unwrap(); // CPU ids 0..=255, mask 0x1ff
/// assert_eq!(codec.cpu_mask(), 0x1ff);
/// let ent = codec.encode(0xdead_beef, 7);
/// assert_eq!(ent, (0xdead_beef & !0x1ff) | 7);
/// assert_eq!(codec.decode(ent, 0xdead_beef), Some(7));
/// assert_eq!(codec.decode(ent, 0x1234_5678), None); // another flow's entry
/// assert_eq!(codec.decode(SlotCodec::EMPTY, 0xffff_ffff), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCodec {
    cpu_mask: u32,
    nr_cpus: u32,
}

impl SlotCodec {
    /// The empty marker: no CPU recorded.
    #[doc(alias = "RPS_NO_CPU")]
    pub const EMPTY: u32 = u32::MAX;

    /// A codec for CPU ids `0..nr_cpus`.
    pub fn new(nr_cpus: usize) -> Result<Self, TableError> {
        if nr_cpus == 0 || nr_cpus > MAX_CPUS {
            return Err(TableError::BadCpuCount(nr_cpus));
        }
        let nr = u32::try_from(nr_cpus).map_err(|_| TableError::BadCpuCount(nr_cpus))?;
        Ok(Self {
            cpu_mask: (nr + 1).next_power_of_two() - 1,
            nr_cpus: nr,
        })
    }

    /// The mask of the CPU bits of an entry.
    #[inline]
    #[doc(alias = "rps_cpu_mask")]
    pub fn cpu_mask(&self) -> u32 {
        self.cpu_mask
    }

    /// Number of CPU ids the codec represents.
    #[inline]
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus as usize
    }

    /// The entry for `hash` on `cpu` (`cpu` must be `< nr_cpus`; larger ids
    /// are truncated to the CPU bits, which [`SlotCodec::decode`] then
    /// rejects only if they land on or above `nr_cpus`).
    #[inline]
    pub fn encode(&self, hash: u32, cpu: CpuId) -> u32 {
        (hash & !self.cpu_mask) | (cpu as u32 & self.cpu_mask)
    }

    /// The CPU `ent` records for `hash`, or `None` when `ent` is empty, holds
    /// another flow, or carries no valid CPU.
    #[inline]
    pub fn decode(&self, ent: u32, hash: u32) -> Option<CpuId> {
        // `cpu_mask` is 2^k - 1 (all ones from bit 0), so "the hash bits
        // agree" (`(ent ^ hash) & !cpu_mask == 0`) is `ent ^ hash <= cpu_mask`.
        // The EMPTY marker's CPU field is cpu_mask >= nr_cpus: rejected by
        // the second test. `&`, not `&&`: one branch (or none) per lookup.
        let cpu = ent & self.cpu_mask;
        ((ent ^ hash <= self.cpu_mask) & (cpu < self.nr_cpus)).then_some(cpu as CpuId)
    }

    /// What `ent` is from the point of view of the flow `hash`: empty, another
    /// flow's, or this flow's (with its CPU bits, `ent & cpu_mask`).
    #[inline]
    pub fn classify(&self, ent: u32, hash: u32) -> OldSlot {
        if ent == Self::EMPTY {
            OldSlot::Empty
        } else if (ent ^ hash) & !self.cpu_mask != 0 {
            OldSlot::OtherFlow
        } else {
            OldSlot::SameFlow((ent & self.cpu_mask) as CpuId)
        }
    }
}

/// Counters of what `record` did on one CPU, bumped by the application
/// threads running there. One padded block per CPU, apart from the table's
/// read-mostly header.
#[derive(Debug, Default)]
struct RecordCounters {
    written: [AtomicU64; WriteReason::ALL.len()],
    suppressed: AtomicU64,
}

/// A snapshot of a desired table's record counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordStats {
    written: [u64; WriteReason::ALL.len()],
    /// Same-flow CPU changes the rule did not write.
    pub suppressed: u64,
}

impl RecordStats {
    /// Writes made for `reason`.
    pub fn written(&self, reason: WriteReason) -> u64 {
        self.written[reason as usize]
    }

    /// All writes (every reason).
    pub fn updates(&self) -> u64 {
        self.written.iter().sum()
    }
}

/// The desired-CPU table (`rps_sock_flow_table`): lock-free, one atomic word
/// per entry, written by consumers through the update rule, read by
/// dispatchers.
///
/// ```
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::policy::{Policy, RecordOutcome, WriteReason};
/// use steer_core::table::DesiredCpuTable;
///
/// let layout = CpuLayout::uniform(8, 4).unwrap(); // LLCs {0-3}, {4-7}
/// let all = CpuSet::first(8);
/// let table = DesiredCpuTable::with_policy(4096, 8, Policy::LlcAffinity).unwrap();
/// let flow = 0x9e37_79b9;
///
/// assert_eq!(table.lookup(flow), None);
/// let out = table.record(flow, 1, &all, &layout).unwrap();
/// assert_eq!(out, RecordOutcome::Written(WriteReason::NewOrOtherFlow));
/// // The consumer hops to CPU 2, same LLC: no update.
/// assert_eq!(table.record(flow, 2, &all, &layout).unwrap(), RecordOutcome::Suppressed);
/// assert_eq!(table.lookup(flow), Some(1));
/// // ... to CPU 6, another LLC: written.
/// assert!(table.record(flow, 6, &all, &layout).unwrap().wrote());
/// assert_eq!(table.lookup(flow), Some(6));
/// assert_eq!(table.stats().updates(), 2);
/// ```
#[derive(Debug)]
#[doc(alias("rps_sock_flow_table", "sock_flow_table"))]
pub struct DesiredCpuTable {
    // Read-mostly header: every lookup reads these.
    codec: SlotCodec,
    index_mask: u32,
    policy: PolicySwitch,
    entries: Box<[AtomicU32]>,
    // Write-heavy: bumped by application threads; one padded block per
    // recording CPU, in their own allocation.
    counters: Box<[CachePadded<RecordCounters>]>,
}

impl DesiredCpuTable {
    /// A table of `entries` slots (a power of two) for CPUs `0..nr_cpus`,
    /// all empty, under [`Policy::Always`].
    pub fn new(entries: usize, nr_cpus: usize) -> Result<Self, TableError> {
        Self::with_policy(entries, nr_cpus, Policy::Always)
    }

    /// Like [`DesiredCpuTable::new`] with a starting policy.
    pub fn with_policy(entries: usize, nr_cpus: usize, policy: Policy) -> Result<Self, TableError> {
        if entries == 0 || !entries.is_power_of_two() || entries > MAX_ENTRIES {
            return Err(TableError::BadSize(entries));
        }
        let codec = SlotCodec::new(nr_cpus)?;
        let index_mask = u32::try_from(entries - 1).map_err(|_| TableError::BadSize(entries))?;
        Ok(Self {
            codec,
            index_mask,
            policy: PolicySwitch::new(policy),
            entries: (0..entries)
                .map(|_| AtomicU32::new(SlotCodec::EMPTY))
                .collect(),
            counters: (0..nr_cpus)
                .map(|_| CachePadded::new(RecordCounters::default()))
                .collect(),
        })
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a table has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry codec (CPU mask, CPU count).
    pub fn codec(&self) -> SlotCodec {
        self.codec
    }

    /// The run-time policy switch (the sysctl analog).
    pub fn policy(&self) -> &PolicySwitch {
        &self.policy
    }

    #[inline]
    fn slot(&self, hash: u32) -> &AtomicU32 {
        // In bounds: index_mask == entries.len() - 1 (a power of two).
        &self.entries[(hash & self.index_mask) as usize]
    }

    /// The CPU recorded for flow `hash`, if its slot holds this flow. Hash 0
    /// finds nothing. Does not check whether the CPU is online (the rx-queue
    /// table does).
    #[inline]
    pub fn lookup(&self, hash: u32) -> Option<CpuId> {
        if hash == 0 {
            return None;
        }
        // Pairs with the relaxed store in `record`: one self-contained word.
        let ent = self.slot(hash).load(Ordering::Relaxed);
        self.codec.decode(ent, hash)
    }

    /// The raw entry of the slot `hash` maps to (for tests and tools).
    pub fn raw_entry(&self, hash: u32) -> u32 {
        self.slot(hash).load(Ordering::Relaxed)
    }

    /// A consumer of flow `hash` ran on `cpu`, allowed on `allowed`: rewrite
    /// the flow's entry if the current policy says so (see
    /// [`crate::policy::decide`]) and say what happened.
    #[inline]
    #[doc(alias = "rps_record_sock_flow")]
    pub fn record(
        &self,
        hash: u32,
        cpu: CpuId,
        allowed: &CpuSet,
        layout: &CpuLayout,
    ) -> Result<RecordOutcome, RecordError> {
        self.record_with(self.policy.get(), hash, cpu, allowed, layout)
    }

    /// [`DesiredCpuTable::record`] under an explicit policy, ignoring the
    /// switch.
    #[inline]
    pub fn record_with(
        &self,
        policy: Policy,
        hash: u32,
        cpu: CpuId,
        allowed: &CpuSet,
        layout: &CpuLayout,
    ) -> Result<RecordOutcome, RecordError> {
        if hash == 0 {
            return Err(RecordError::NoHash);
        }
        if cpu >= self.codec.nr_cpus() {
            return Err(RecordError::CpuOutOfRange {
                cpu,
                nr_cpus: self.codec.nr_cpus(),
            });
        }
        let slot = self.slot(hash);
        let old = slot.load(Ordering::Relaxed);
        let outcome = decide(policy, self.codec.classify(old, hash), cpu, allowed, layout);
        let counters = self.counters.get(cpu);
        match outcome {
            RecordOutcome::Written(reason) => {
                slot.store(self.codec.encode(hash, cpu), Ordering::Relaxed);
                if let Some(c) = counters {
                    c.written[reason as usize].fetch_add(1, Ordering::Relaxed);
                }
            }
            RecordOutcome::Suppressed => {
                if let Some(c) = counters {
                    c.suppressed.fetch_add(1, Ordering::Relaxed);
                }
            }
            RecordOutcome::Unchanged => {}
        }
        Ok(outcome)
    }

    /// Empties the slot of flow `hash` if it still holds that flow (the
    /// consumer closed it; the kernel's `sock_rps_delete_flow`). Returns
    /// whether it did.
    pub fn forget(&self, hash: u32) -> bool {
        if hash == 0 {
            return false;
        }
        let slot = self.slot(hash);
        let old = slot.load(Ordering::Relaxed);
        if let OldSlot::SameFlow(_) = self.codec.classify(old, hash) {
            // Compare-and-swap so a newer record by another flow survives.
            slot.compare_exchange(old, SlotCodec::EMPTY, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        } else {
            false
        }
    }

    /// A snapshot of the record counters, summed over the recording CPUs.
    pub fn stats(&self) -> RecordStats {
        let mut stats = RecordStats::default();
        for c in self.counters.iter() {
            for (sum, n) in stats.written.iter_mut().zip(&c.written) {
                *sum += n.load(Ordering::Relaxed);
            }
            stats.suppressed += c.suppressed.load(Ordering::Relaxed);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_mask_is_strictly_above_every_cpu() {
        for (n, mask) in [
            (1, 1),
            (2, 3),
            (3, 3),
            (4, 7),
            (5, 7),
            (256, 511),
            (1024, 2047),
        ] {
            let c = SlotCodec::new(n).unwrap();
            assert_eq!(c.cpu_mask(), mask, "nr_cpus {n}");
            // The empty marker never decodes, whatever the hash.
            assert_eq!(c.decode(SlotCodec::EMPTY, u32::MAX), None);
            assert_eq!(c.classify(SlotCodec::EMPTY, u32::MAX), OldSlot::Empty);
            // The highest CPU round-trips even for an all-ones hash.
            assert_eq!(c.decode(c.encode(u32::MAX, n - 1), u32::MAX), Some(n - 1));
        }
        assert_eq!(SlotCodec::new(0), Err(TableError::BadCpuCount(0)));
        assert_eq!(
            SlotCodec::new(MAX_CPUS + 1),
            Err(TableError::BadCpuCount(MAX_CPUS + 1))
        );
    }

    #[test]
    fn kernel_layout() {
        let c = SlotCodec::new(8).unwrap(); // mask 0xf
        assert_eq!(c.encode(0xabcd_1234, 5), 0xabcd_1235);
        assert_eq!(c.classify(0xabcd_1235, 0xabcd_123f), OldSlot::SameFlow(5));
        assert_eq!(c.classify(0xabcd_1235, 0xabcd_1334), OldSlot::OtherFlow);
    }

    #[test]
    fn bad_sizes_rejected() {
        for n in [0, 3, 4095, MAX_ENTRIES * 2] {
            assert_eq!(
                DesiredCpuTable::new(n, 4).unwrap_err(),
                TableError::BadSize(n)
            );
        }
        assert!(DesiredCpuTable::new(1, 4).is_ok());
    }

    #[test]
    fn lookup_ignores_other_flows_and_hash_zero() {
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let all = CpuSet::first(4);
        let t = DesiredCpuTable::new(16, 4).unwrap();
        let a = 0x1000_0003;
        let b = 0x2000_0003; // same slot, different hash bits
        t.record(a, 2, &all, &layout).unwrap();
        assert_eq!(t.lookup(a), Some(2));
        assert_eq!(t.lookup(b), None);
        assert_eq!(t.lookup(0), None);
        assert_eq!(t.record(0, 1, &all, &layout), Err(RecordError::NoHash));
        assert_eq!(
            t.record(a, 4, &all, &layout),
            Err(RecordError::CpuOutOfRange { cpu: 4, nr_cpus: 4 })
        );
    }

    #[test]
    fn stats_sum_over_recording_cpus() {
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let all = CpuSet::first(4);
        let t = DesiredCpuTable::with_policy(64, 4, Policy::LlcAffinity).unwrap();
        for (i, cpu) in [0, 1, 2, 3].into_iter().enumerate() {
            let flow = 0x100 * (i as u32 + 1) + 1;
            t.record(flow, cpu, &all, &layout).unwrap(); // new
            t.record(flow, cpu ^ 1, &all, &layout).unwrap(); // same LLC: suppressed
            t.record(flow, cpu ^ 2, &all, &layout).unwrap(); // cross LLC
        }
        let s = t.stats();
        assert_eq!(s.written(WriteReason::NewOrOtherFlow), 4);
        assert_eq!(s.written(WriteReason::CrossLlc), 4);
        assert_eq!(s.suppressed, 4);
        assert_eq!(s.updates(), 8);
    }

    #[test]
    fn forget_only_removes_own_flow() {
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let all = CpuSet::first(4);
        let t = DesiredCpuTable::new(16, 4).unwrap();
        let a = 0x1000_0003;
        let b = 0x2000_0003;
        t.record(a, 1, &all, &layout).unwrap();
        assert!(!t.forget(b));
        assert_eq!(t.lookup(a), Some(1));
        assert!(t.forget(a));
        assert_eq!(t.lookup(a), None);
        assert_eq!(t.raw_entry(a), SlotCodec::EMPTY);
        assert!(!t.forget(0));
    }
}
