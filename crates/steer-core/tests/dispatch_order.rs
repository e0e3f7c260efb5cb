//! The dispatcher's two promises, checked over random schedules: packets of
//! one flow reach the handler in send order, whatever the consumers' CPU
//! migrations, the load balancer's assignments, ring sizes, policies and
//! fast-path setting; and every packet is accounted for: packets in =
//! processed + counted drops.
//!
//! The schedule is simulated on one thread (dispatchers and workers take
//! turns in a random order), which explores interleavings deterministically
//! and shrinks failures; `worker_threads.rs` runs the same with real threads.

use std::collections::HashMap;

mod common;

use common::{flow_hash, ByFlowId};
use proptest::prelude::*;
use steer_core::cpu::CpuSet;
use steer_core::dispatch::{Dispatcher, FramePool, Shared};
use steer_core::policy::Policy;
use steer_core::ring::{self, Consumer};
use steer_core::table::RxFlowTable;

/// Frame bytes: flow id (u32 LE) then sequence number (u32 LE).
struct Pool {
    frames: Vec<[u8; 8]>,
    released: usize,
}

impl FramePool<usize> for Pool {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.frames[*d]
    }
    fn release(&mut self, _d: usize) {
        self.released += 1;
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Rx queue `rxq` receives `n` packets of flows drawn from `flows`.
    Receive { rxq: usize, flows: Vec<u32> },
    /// Worker `cpu` handles up to `n` packets from its rings.
    Drain { cpu: usize, n: usize },
    /// The consumer of `flow` now runs on `cpu`.
    Migrate { flow: u32, cpu: usize },
    /// Switch the update policy / fast path.
    Toggle { llc: bool, fast_path: bool },
    /// CPU goes offline/online.
    Hotplug { cpu: usize, online: bool },
    /// The load balancer assigns `flow`'s bucket to `cpu`.
    Assign { flow: u32, cpu: usize },
    /// The load balancer is switched on or off.
    Balance { on: bool },
}

fn step(nr_cpus: usize, nr_flows: u32) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..2usize, prop::collection::vec(0..nr_flows, 1..40)).prop_map(|(rxq, flows)| Step::Receive { rxq, flows }),
        4 => (0..nr_cpus, 1..64usize).prop_map(|(cpu, n)| Step::Drain { cpu, n }),
        3 => (0..nr_flows, 0..nr_cpus).prop_map(|(flow, cpu)| Step::Migrate { flow, cpu }),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(llc, fast_path)| Step::Toggle { llc, fast_path }),
        1 => (1..nr_cpus, any::<bool>()).prop_map(|(cpu, online)| Step::Hotplug { cpu, online }),
        3 => (0..nr_flows, 0..nr_cpus).prop_map(|(flow, cpu)| Step::Assign { flow, cpu }),
        1 => any::<bool>().prop_map(|on| Step::Balance { on }),
    ]
}

struct Sim {
    pool: Pool,
    shared: Shared,
    dispatchers: Vec<Dispatcher<usize, ByFlowId>>,
    /// consumers[cpu][rxq]
    consumers: Vec<Vec<Consumer<usize>>>,
    /// Per flow, the sequence numbers the handler saw, in order.
    seen: HashMap<u32, Vec<u32>>,
    next_seq: HashMap<u32, u32>,
    sent: usize,
}

impl Sim {
    fn new(nr_cpus: usize, ring_caps: &[usize]) -> Self {
        let shared = common::shared(nr_cpus);
        let mut consumers: Vec<Vec<Consumer<usize>>> = (0..nr_cpus).map(|_| Vec::new()).collect();
        let mut dispatchers = Vec::new();
        for rxq in 0..2 {
            let mut producers = Vec::new();
            for (cpu, slot) in consumers.iter_mut().enumerate() {
                let cap = ring_caps[(rxq * nr_cpus + cpu) % ring_caps.len()];
                let (p, c) = ring::channel(cap).unwrap();
                producers.push(Some(p));
                slot.push(c);
            }
            dispatchers.push(Dispatcher::new(
                rxq, // rx queue i is dispatched on CPU i
                rxq as u32,
                ByFlowId,
                RxFlowTable::new(rxq as u32, 64).unwrap(),
                producers,
                CpuSet::first(nr_cpus),
                shared.clone(),
            ));
        }
        Self {
            pool: Pool {
                frames: Vec::new(),
                released: 0,
            },
            shared,
            dispatchers,
            consumers,
            seen: HashMap::new(),
            next_seq: HashMap::new(),
            sent: 0,
        }
    }

    fn run(&mut self, s: &Step) {
        match s {
            Step::Receive { rxq, flows } => {
                let mut batch = Vec::new();
                for &f in flows {
                    // A flow always arrives on the same rx queue (RSS).
                    if (f as usize) % 2 != *rxq {
                        continue;
                    }
                    let seq = self.next_seq.entry(f).or_insert(0);
                    let bytes = common::frame(f, *seq);
                    *seq += 1;
                    self.pool.frames.push(bytes);
                    batch.push(self.pool.frames.len() - 1);
                }
                self.sent += batch.len();
                let seen = &mut self.seen;
                let mut handler = |d: usize, pool: &mut Pool| {
                    let (flow, seq) = common::read(&pool.frames[d]);
                    seen.entry(flow).or_default().push(seq);
                    pool.release(d);
                };
                self.dispatchers[*rxq].dispatch(&batch, &mut self.pool, &mut handler);
            }
            Step::Drain { cpu, n } => {
                let mut left = *n;
                for c in &mut self.consumers[*cpu] {
                    let pool = &mut self.pool;
                    let seen = &mut self.seen;
                    left -= c.consume(left, |d| {
                        let (flow, seq) = common::read(&pool.frames[d]);
                        seen.entry(flow).or_default().push(seq);
                        pool.released += 1;
                    });
                }
                let processed = (*n - left) as u64;
                let mut local = steer_core::stats::LocalStats {
                    processed,
                    ..Default::default()
                };
                self.shared.stats.cpu(*cpu).unwrap().flush(&mut local);
            }
            Step::Migrate { flow, cpu } => {
                let all = CpuSet::first(self.shared.layout.nr_cpus());
                self.shared
                    .desired
                    .record(flow_hash(*flow), *cpu, &all, &self.shared.layout)
                    .unwrap();
            }
            Step::Toggle { llc, fast_path } => {
                self.shared.desired.policy().set(if *llc {
                    Policy::LlcAffinity
                } else {
                    Policy::Always
                });
                self.shared
                    .switches
                    .fast_path
                    .store(*fast_path, std::sync::atomic::Ordering::Relaxed);
            }
            Step::Hotplug { cpu, online } => self.shared.layout.set_online(*cpu, *online),
            Step::Assign { flow, cpu } => {
                // The flow's rx queue is flow % 2; its table has 64 buckets.
                let rxq = *flow % 2;
                let tables = self.shared.balance.tables();
                let t = tables.iter().find(|t| t.rxq() == rxq).unwrap();
                t.assign(flow_hash(*flow) as usize & 63, *cpu);
            }
            Step::Balance { on } => self.shared.balance.set_on(*on),
        }
    }

    fn drain_all(&mut self) {
        for cpu in 0..self.consumers.len() {
            self.run(&Step::Drain {
                cpu,
                n: usize::MAX / 2,
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn per_flow_order_and_exact_accounting(
        nr_cpus in 2..5usize,
        ring_caps in prop::collection::vec(prop::sample::select(vec![1usize, 2, 4, 8, 64]), 1..8),
        steps in prop::collection::vec(step(4, 12), 1..120),
    ) {
        let mut sim = Sim::new(nr_cpus, &ring_caps);
        for s in &steps {
            let s = match s {
                Step::Drain { cpu, n } => Step::Drain { cpu: cpu % nr_cpus, n: *n },
                Step::Migrate { flow, cpu } => Step::Migrate { flow: *flow, cpu: cpu % nr_cpus },
                Step::Hotplug { cpu, online } => Step::Hotplug { cpu: 1 + cpu % (nr_cpus - 1), online: *online },
                Step::Assign { flow, cpu } => Step::Assign { flow: *flow, cpu: cpu % nr_cpus },
                other => other.clone(),
            };
            sim.run(&s);
        }
        sim.drain_all();

        for (flow, seqs) in &sim.seen {
            prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "flow {} out of order: {:?}", flow, seqs);
        }
        let total = sim.shared.stats.snapshot().total;
        let handled: usize = sim.seen.values().map(Vec::len).sum();
        prop_assert_eq!(total.processed as usize, handled);
        prop_assert_eq!(sim.sent as u64, total.processed + total.dropped + total.flow_limit_drops + total.malformed);
        // Every frame went back to the pool exactly once.
        prop_assert_eq!(sim.pool.released, sim.sent);
    }
}

#[test]
fn fast_path_halves_ring_enqueues_for_local_flows() {
    let run = |fast_path: bool| {
        let mut sim = Sim::new(2, &[1024]);
        sim.shared
            .switches
            .fast_path
            .store(fast_path, std::sync::atomic::Ordering::Relaxed);
        // Consumers of the even flows (rx queue 0, dispatched on CPU 0) run on CPU 0.
        for flow in (0..16).step_by(2) {
            sim.run(&Step::Migrate { flow, cpu: 0 });
        }
        for _ in 0..50 {
            sim.run(&Step::Receive {
                rxq: 0,
                flows: (0..16).step_by(2).collect(),
            });
            sim.run(&Step::Drain { cpu: 0, n: 64 });
        }
        sim.drain_all();
        sim.shared.stats.snapshot().total
    };
    let on = run(true);
    let off = run(false);
    let enqueues = |t: &steer_core::stats::LocalStats| t.queued_local + t.steered_out;
    assert_eq!(on.processed, 400);
    assert_eq!(off.processed, 400);
    assert_eq!(enqueues(&off), 400);
    assert!(
        enqueues(&on) * 2 <= enqueues(&off),
        "on {} off {}",
        enqueues(&on),
        enqueues(&off)
    );
    assert_eq!(on.fast_path, 400);
}

#[test]
fn flow_moves_only_after_its_queued_packets_are_handled() {
    let mut sim = Sim::new(2, &[64]);
    sim.shared
        .switches
        .fast_path
        .store(false, std::sync::atomic::Ordering::Relaxed);
    sim.run(&Step::Migrate { flow: 0, cpu: 0 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0; 5],
    });
    // The consumer moves to CPU 1 while 5 packets wait on CPU 0.
    sim.run(&Step::Migrate { flow: 0, cpu: 1 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0; 3],
    });
    let s = sim.shared.stats.snapshot().total;
    assert_eq!(s.held_back, 3, "the move waits for CPU 0's queue");
    assert_eq!(sim.consumers[1][0].len(), 0);
    sim.run(&Step::Drain { cpu: 0, n: 100 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0; 2],
    });
    assert_eq!(
        sim.consumers[1][0].len(),
        2,
        "moved once CPU 0 had handled them"
    );
    sim.drain_all();
    assert_eq!(sim.seen[&0], (0..10).collect::<Vec<_>>());
}

#[test]
fn a_balancer_assignment_moves_an_unclaimed_flow_only_past_its_queued_packets() {
    // Two CPUs, RPS spread; flow 2 arrives on rx queue 0 (CPU 0) and its
    // hash spreads it to CPU `home`; the balancer assigns it to the other.
    let mut sim = Sim::new(2, &[64]);
    sim.shared
        .switches
        .fast_path
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let home = ((u64::from(flow_hash(2)) * 2) >> 32) as usize;
    let other = 1 - home;
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![2; 4],
    });
    assert_eq!(sim.consumers[home][0].len(), 4);
    // Assigned while off: ignored.
    sim.run(&Step::Assign {
        flow: 2,
        cpu: other,
    });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![2],
    });
    assert_eq!(sim.consumers[home][0].len(), 5);
    // On: the move waits for the 5 packets queued at home.
    sim.run(&Step::Balance { on: true });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![2; 2],
    });
    assert_eq!(sim.shared.stats.snapshot().total.held_back, 2);
    assert_eq!(sim.consumers[other][0].len(), 0);
    sim.run(&Step::Drain { cpu: home, n: 100 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![2; 3],
    });
    assert_eq!(
        sim.consumers[other][0].len(),
        3,
        "moved once home had handled them"
    );
    // The bucket's count and CPU are what the balancer reads.
    let tables = sim.shared.balance.tables();
    let t = tables.iter().find(|t| t.rxq() == 0).unwrap();
    assert_eq!(t.seen(flow_hash(2) as usize & 63), (5, Some(other)));
    // A consumer's record wins over the assignment.
    sim.run(&Step::Drain { cpu: other, n: 100 });
    sim.run(&Step::Migrate { flow: 2, cpu: home });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![2; 2],
    });
    assert_eq!(sim.consumers[home][0].len(), 2);
    sim.drain_all();
    assert_eq!(sim.seen[&2], (0..12).collect::<Vec<_>>());
}

#[test]
fn llc_rule_ignores_intra_llc_churn_but_follows_a_cross_llc_move_at_once() {
    // 4 CPUs, LLCs {0,1} and {2,3}; flow 0 arrives on rx queue 0 (CPU 0).
    let mut sim = Sim::new(4, &[64]);
    sim.run(&Step::Toggle {
        llc: true,
        fast_path: true,
    });
    sim.run(&Step::Migrate { flow: 0, cpu: 0 });
    for i in 0..100 {
        // The consumer hops between CPUs 0 and 1 (same LLC) between packets.
        sim.run(&Step::Migrate {
            flow: 0,
            cpu: i % 2,
        });
        sim.run(&Step::Receive {
            rxq: 0,
            flows: vec![0],
        });
    }
    let before = sim.shared.stats.snapshot().total;
    assert_eq!(before.hook_calls, 1, "only the first placement");
    assert_eq!(before.fast_path, 100, "stays on CPU 0, inline");
    // Now the consumer moves to CPU 3, across the LLC boundary.
    sim.run(&Step::Migrate { flow: 0, cpu: 3 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0],
    });
    let after = sim.shared.stats.snapshot().total;
    assert_eq!(after.hook_calls, 2, "the cross-LLC move is followed");
    assert_eq!(sim.consumers[3][0].len(), 1, "on the very next packet");
    sim.drain_all();
    assert_eq!(sim.seen[&0], (0..101).collect::<Vec<_>>());
}

#[test]
fn packets_a_full_ring_refused_do_not_pin_their_flow() {
    // Ring capacity 1: of 3 packets staged for CPU 1, 2 are refused.
    let mut sim = Sim::new(2, &[1]);
    sim.run(&Step::Migrate { flow: 0, cpu: 1 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0; 3],
    });
    assert_eq!(sim.shared.stats.snapshot().total.dropped, 2);
    sim.run(&Step::Drain { cpu: 1, n: 10 });
    // The consumer moves to CPU 0: the one packet that made it was handled,
    // so the flow must move now (not wait for positions that never existed).
    sim.run(&Step::Migrate { flow: 0, cpu: 0 });
    sim.run(&Step::Receive {
        rxq: 0,
        flows: vec![0],
    });
    let t = sim.shared.stats.snapshot().total;
    assert_eq!(t.held_back, 0);
    assert_eq!(t.fast_path, 1, "moved to CPU 0 and ran inline");
    assert_eq!(sim.seen[&0], vec![0, 3]);
}
