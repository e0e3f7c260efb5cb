//! The desired-CPU table: encoding, lookups that ignore other flows, and
//! concurrent recorders and readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use steer_core::cpu::{CpuLayout, CpuSet};
use steer_core::policy::{Policy, RecordOutcome};
use steer_core::table::DesiredCpuTable;

#[test]
fn entries_use_the_kernel_layout() {
    let l = CpuLayout::uniform(8, 4).unwrap();
    let t = DesiredCpuTable::new(4096, 8).unwrap();
    let mask = t.codec().cpu_mask();
    assert_eq!(mask, 0xf);
    t.record(0xabcd_ef12, 5, &CpuSet::first(8), &l).unwrap();
    assert_eq!(t.raw_entry(0xabcd_ef12), (0xabcd_ef12 & !mask) | 5);
}

#[test]
fn concurrent_recorders_never_leak_another_flows_cpu() {
    // Flow i is only ever recorded on CPUs congruent to i mod 4; a reader
    // must never see a CPU of the wrong class for a flow.
    let l = Arc::new(CpuLayout::uniform(16, 4).unwrap());
    let t = Arc::new(DesiredCpuTable::new(64, 16).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let flows: Vec<u32> = (0..256u32)
        .map(|i| (i << 20) | (i % 64) | 1 << 31)
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (l, t, flows) = (Arc::clone(&l), Arc::clone(&t), flows.clone());
            std::thread::spawn(move || {
                let all = CpuSet::first(16);
                for round in 0..200usize {
                    for (i, &f) in flows.iter().enumerate() {
                        let cpu = (i % 4) + 4 * ((round + w) % 4);
                        t.record(f, cpu, &all, &l).unwrap();
                    }
                }
            })
        })
        .collect();
    let reader = {
        let (t, stop, flows) = (Arc::clone(&t), Arc::clone(&stop), flows.clone());
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (i, &f) in flows.iter().enumerate() {
                    if let Some(cpu) = t.lookup(f) {
                        assert_eq!(cpu % 4, i % 4, "flow {i} got CPU {cpu}");
                        seen += 1;
                    }
                }
            }
            seen
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

proptest! {
    /// Under `Always`, after any sequence of records the table answers with
    /// the last CPU recorded for each flow still owning its slot, and with
    /// nothing for flows whose slot another flow took.
    #[test]
    fn always_lookup_is_last_record(
        recs in prop::collection::vec((1u32..=u32::MAX, 0usize..12), 1..200)
    ) {
        let l = CpuLayout::uniform(12, 4).unwrap();
        let all = CpuSet::first(12);
        let t = DesiredCpuTable::with_policy(32, 12, Policy::Always).unwrap();
        let mut model: std::collections::HashMap<usize, (u32, usize)> = Default::default();
        let mask = t.codec().cpu_mask();
        for (hash, cpu) in recs {
            let out = t.record(hash, cpu, &all, &l).unwrap();
            let slot = (hash & 31) as usize;
            let expect_unchanged = model
                .get(&slot)
                .is_some_and(|&(h, c)| (h ^ hash) & !mask == 0 && c == cpu);
            prop_assert_eq!(out == RecordOutcome::Unchanged, expect_unchanged);
            model.insert(slot, (hash, cpu));
            prop_assert_eq!(t.lookup(hash), Some(cpu));
        }
        for (&slot, &(hash, cpu)) in &model {
            prop_assert_eq!(t.lookup(hash), Some(cpu), "slot {}", slot);
        }
    }

    /// Under `LlcAffinity` the recorded CPU always shares an LLC with the
    /// consumer's latest CPU (all CPUs online and allowed).
    #[test]
    fn llc_lookup_shares_llc_with_latest_cpu(
        cpus in prop::collection::vec(0usize..12, 1..100)
    ) {
        let l = CpuLayout::uniform(12, 4).unwrap();
        let all = CpuSet::first(12);
        let t = DesiredCpuTable::with_policy(32, 12, Policy::LlcAffinity).unwrap();
        let flow = 0x8765_4321;
        for cpu in cpus {
            t.record(flow, cpu, &all, &l).unwrap();
            let got = t.lookup(flow).unwrap();
            prop_assert!(l.shares_llc(got, cpu));
        }
    }
}
