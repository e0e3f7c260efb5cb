//! Test frames shared by the dispatcher and runtime tests: 8 bytes holding a
//! flow id and a sequence number (both u32 LE), and a classifier that hashes
//! the flow id, so tests check per-flow order without building real packets;
//! the dispatcher state those tests share ([`shared`]) and a two-CPU
//! dispatcher on it ([`two_cpu_dispatcher`]); the runtime tests'
//! frame pool and rx queue ([`rig`]); and the reference
//! for the flow classifier ([`classify`]).

// Each test binary uses its own part of these helpers.
#![allow(dead_code)]

pub mod classify;
pub mod rig;

use std::sync::Arc;

use steer_core::cpu::{CpuLayout, CpuSet};
use steer_core::dispatch::{Dispatcher, Pins, Shared};
use steer_core::flow::{Classifier, FlowInfo, Malformed};
use steer_core::ring::{self, Consumer};
use steer_core::stats::Stats;
use steer_core::table::{DesiredCpuTable, RxFlowTable};

/// Dispatcher state for `nr_cpus` CPUs, two per LLC, with a 256-entry
/// desired-CPU table.
pub fn shared(nr_cpus: usize) -> Shared {
    Shared {
        desired: Arc::new(DesiredCpuTable::new(256, nr_cpus).unwrap()),
        layout: Arc::new(CpuLayout::uniform(nr_cpus, 2).unwrap()),
        stats: Arc::new(Stats::new(nr_cpus)),
        pins: Pins::new(),
        switches: Default::default(),
        balance: Default::default(),
    }
}

/// The dispatcher of rx queue 0 on CPU 0, RPS over CPUs 0 and 1, with an
/// rx flow table of `table` entries and a ring of `ring` slots to each CPU;
/// and the consumer ends of the rings of CPU 0 and CPU 1.
pub fn two_cpu_dispatcher<D: Copy + Send>(
    shared: &Shared,
    ring: usize,
    table: usize,
) -> (Dispatcher<D, ByFlowId>, Consumer<D>, Consumer<D>) {
    let (p0, c0) = ring::channel(ring).unwrap();
    let (p1, c1) = ring::channel(ring).unwrap();
    let d = Dispatcher::new(
        0,
        0,
        ByFlowId,
        RxFlowTable::new(0, table).unwrap(),
        vec![Some(p0), Some(p1)],
        CpuSet::first(2),
        shared.clone(),
    );
    (d, c0, c1)
}

/// The (non-zero) hash of test flow `flow`.
pub fn flow_hash(flow: u32) -> u32 {
    flow.wrapping_mul(0x9E37_79B9) | 1
}

/// The frame of packet `seq` of flow `flow`.
pub fn frame(flow: u32, seq: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&flow.to_le_bytes());
    b[4..].copy_from_slice(&seq.to_le_bytes());
    b
}

/// `(flow, seq)` of a test frame.
pub fn read(f: &[u8; 8]) -> (u32, u32) {
    let [a, b, c, d, e, g, h, i] = *f;
    (
        u32::from_le_bytes([a, b, c, d]),
        u32::from_le_bytes([e, g, h, i]),
    )
}

/// Classifies test frames by flow id.
pub struct ByFlowId;

impl Classifier for ByFlowId {
    fn classify(&mut self, f: &[u8], _: Option<u32>) -> Result<Option<FlowInfo>, Malformed> {
        let id: [u8; 4] = f
            .get(..4)
            .ok_or(Malformed)?
            .try_into()
            .map_err(|_| Malformed)?;
        Ok(Some(FlowInfo {
            hash: flow_hash(u32::from_le_bytes(id)),
            dst_port: 0,
        }))
    }
}
