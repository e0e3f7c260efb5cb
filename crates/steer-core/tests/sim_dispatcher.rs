//! The simulation decides as the real dispatcher does: the same random
//! schedule of packet bursts, consumption records and hotplug, run through
//! `sim::Sim` and through real `Dispatcher`s with real rings (drained
//! completely between bursts, which is what the simulation's queue model
//! does when a burst is followed by a long gap), gives the same counts:
//! fast path, ring pushes, drops, held-back moves, hook calls and desired
//! table writes. If the dispatcher's decision changes, this fails until the
//! simulation follows.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{flow_hash, ByFlowId};
use proptest::prelude::*;
use steer_core::cpu::{CpuLayout, CpuSet};
use steer_core::dispatch::{Dispatcher, FramePool, Shared};
use steer_core::policy::Policy;
use steer_core::ring::{self, Consumer};
use steer_core::runtime::RpsMode;
use steer_core::sim::{Event, Sim, SimConfig};
use steer_core::table::RxFlowTable;

/// Frames: flow id then sequence number (see `common`).
struct Pool(Vec<[u8; 8]>);

impl FramePool<usize> for Pool {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.0[*d]
    }
    fn release(&mut self, _d: usize) {}
}

#[derive(Debug, Clone)]
enum Step {
    Burst { rxq: u32, flows: Vec<u32> },
    Consume { flow: u32, cpu: usize },
    Hotplug { cpu: usize, online: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..2u32, prop::collection::vec(0..10u32, 1..24))
            .prop_map(|(rxq, flows)| Step::Burst { rxq, flows }),
        3 => (0..10u32, 0..8usize).prop_map(|(flow, cpu)| Step::Consume { flow, cpu }),
        1 => (1..8usize, any::<bool>()).prop_map(|(cpu, online)| Step::Hotplug { cpu, online }),
    ]
}

/// Two rx queues (queue i dispatched on CPU i) over real rings.
struct Real {
    shared: Shared,
    pool: Pool,
    dispatchers: Vec<Dispatcher<usize, ByFlowId>>,
    consumers: Vec<Consumer<usize>>,
}

impl Real {
    fn new(
        layout: Arc<CpuLayout>,
        policy: Policy,
        fast_path: bool,
        cap: usize,
        rps: RpsMode,
    ) -> Self {
        let nr = layout.nr_cpus();
        let shared = Shared::new(layout, 256, policy).unwrap();
        shared
            .switches
            .fast_path
            .store(fast_path, Ordering::Relaxed);
        let mut consumers = Vec::new();
        let dispatchers = (0..2)
            .map(|rxq| {
                let producers = (0..nr)
                    .map(|_| {
                        let (p, c) = ring::channel(cap).unwrap();
                        consumers.push(c);
                        Some(p)
                    })
                    .collect();
                Dispatcher::new(
                    rxq,
                    rxq as u32,
                    ByFlowId,
                    RxFlowTable::new(rxq as u32, 64).unwrap(),
                    producers,
                    match rps {
                        RpsMode::Spread => CpuSet::first(nr),
                        RpsMode::Local => CpuSet::new(),
                    },
                    shared.clone(),
                )
            })
            .collect();
        Self {
            shared,
            pool: Pool(Vec::new()),
            dispatchers,
            consumers,
        }
    }

    fn burst(&mut self, rxq: u32, flows: &[u32]) {
        let batch: Vec<usize> = flows
            .iter()
            .map(|&f| {
                self.pool.0.push(common::frame(f, 0));
                self.pool.0.len() - 1
            })
            .collect();
        self.dispatchers[rxq as usize].dispatch(&batch, &mut self.pool, &mut |_d, _: &mut Pool| {});
        for c in &mut self.consumers {
            c.consume(usize::MAX, |_| {});
        }
    }
}

fn check(
    nr: usize,
    policy: Policy,
    fast_path: bool,
    cap: usize,
    rps: RpsMode,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut real = Real::new(
        Arc::new(CpuLayout::uniform(nr, 2).unwrap()),
        policy,
        fast_path,
        cap,
        rps,
    );
    let cfg = SimConfig {
        workers: CpuSet::first(nr),
        queues: 2,
        policy,
        fast_path,
        rps,
        desired_entries: 256,
        rx_table_entries: 64,
        ring_capacity: cap,
        service_ns: 1_000,
        flow_idle_ms: 0,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg, Arc::new(CpuLayout::uniform(nr, 2).unwrap())).unwrap();
    let all = CpuSet::first(nr);
    for (k, s) in steps.iter().enumerate() {
        // One second apart: every queued packet is handled in between.
        let t = k as u64 * 1_000_000_000;
        match s {
            Step::Burst { rxq, flows } => {
                real.burst(*rxq, flows);
                for &f in flows {
                    sim.apply(
                        t,
                        Event::Packet {
                            hash: flow_hash(f),
                            rxq: *rxq,
                        },
                    )
                    .unwrap();
                }
            }
            Step::Consume { flow, cpu } => {
                let cpu = cpu % nr;
                let layout = Arc::clone(&real.shared.layout);
                real.shared
                    .desired
                    .record(flow_hash(*flow), cpu, &all, &layout)
                    .unwrap();
                sim.apply(
                    t,
                    Event::Consume {
                        hash: flow_hash(*flow),
                        cpu,
                        allowed: Some(all),
                    },
                )
                .unwrap();
            }
            Step::Hotplug { cpu, online } => {
                let cpu = 1 + cpu % (nr - 1);
                real.shared.layout.set_online(cpu, *online);
                sim.apply(
                    t,
                    Event::Online {
                        cpu,
                        online: *online,
                    },
                )
                .unwrap();
            }
        }
    }
    let r = sim.finish();
    let d = real.shared.stats.snapshot().total;
    prop_assert_eq!(
        (d.fast_path, d.steered_out, d.queued_local, d.dropped),
        (r.fast_path, r.steered_out, r.queued_local, r.ring_drops)
    );
    prop_assert_eq!(
        (d.held_back, d.hook_calls),
        (r.rx.held_back, r.rx.hook_calls)
    );
    let moves: u64 = real
        .dispatchers
        .iter()
        .map(|x| x.rx_table().stats().moves)
        .sum();
    prop_assert_eq!(moves, r.first_placements + r.moves);
    let desired = real.shared.desired.stats();
    prop_assert_eq!(
        (desired.updates(), desired.suppressed),
        (r.updates(), r.suppressed)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn sim_counts_what_the_dispatcher_does(
        nr in 2..6usize,
        llc in any::<bool>(),
        fast_path in any::<bool>(),
        cap in prop::sample::select(vec![1usize, 2, 4, 64]),
        spread in any::<bool>(),
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let policy = if llc { Policy::LlcAffinity } else { Policy::Always };
        let rps = if spread { RpsMode::Spread } else { RpsMode::Local };
        check(nr, policy, fast_path, cap, rps, &steps)?;
    }
}

/// A fixed case that exercises every counter at once, so a silent change
/// of either side shows even if the random cases miss it.
#[test]
fn a_fixed_schedule_agrees() {
    let steps = vec![
        Step::Consume { flow: 1, cpu: 3 },
        Step::Burst {
            rxq: 0,
            flows: vec![1, 1, 1, 2, 2, 3],
        },
        Step::Consume { flow: 1, cpu: 0 },
        Step::Burst {
            rxq: 0,
            flows: vec![1, 1, 2],
        },
        Step::Hotplug {
            cpu: 2,
            online: false,
        },
        Step::Burst {
            rxq: 1,
            flows: vec![4, 4, 5, 1],
        },
        Step::Consume { flow: 4, cpu: 1 },
        Step::Burst {
            rxq: 1,
            flows: vec![4, 4, 4, 4, 4],
        },
    ];
    for fast_path in [false, true] {
        check(
            4,
            Policy::LlcAffinity,
            fast_path,
            2,
            RpsMode::Spread,
            &steps,
        )
        .unwrap();
    }
}
