//! The simulation's promises: `last_qtail` holds a move until the old ring
//! has passed the flow's last packet, each move is one hook call, the fast
//! path is taken only when nothing of the flow is queued, expiry re-places
//! a flow, the models drive records, and the same input gives the same
//! report.

use super::*;
use crate::hook::{HookEvent, RecordingHook};

const FLOW: u32 = 0x8000_0001;

/// 4 CPUs, LLCs {0,1} and {2,3}, a worker on each, one rx queue on CPU 0.
fn sim_with(policy: Policy, fast_path: bool) -> Sim<RecordingHook> {
    let cfg = SimConfig {
        workers: CpuSet::first(4),
        queues: 1,
        policy,
        fast_path,
        service_ns: 1_000,
        ..SimConfig::default()
    };
    let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
    Sim::with_hooks(cfg, layout, |_| RecordingHook::default()).unwrap()
}

fn packet(sim: &mut Sim<RecordingHook>, t: u64) {
    sim.apply(t, Event::Packet { hash: FLOW, rxq: 0 }).unwrap();
}

fn consume(sim: &mut Sim<RecordingHook>, t: u64, cpu: CpuId) {
    sim.apply(
        t,
        Event::Consume {
            hash: FLOW,
            cpu,
            allowed: None,
        },
    )
    .unwrap();
}

/// The (from, to) of every hook call so far.
fn hook_moves(sim: &Sim<RecordingHook>) -> Vec<(Option<CpuId>, CpuId)> {
    sim.rx_table(0)
        .unwrap()
        .hook()
        .events()
        .iter()
        .filter_map(|e| match e {
            HookEvent::Steer(mv, _) => Some((mv.from, mv.to)),
            HookEvent::Remove { .. } => None,
        })
        .collect()
}

#[test]
fn a_move_waits_for_the_old_ring_to_pass_the_flows_last_packet() {
    let mut sim = sim_with(Policy::Always, true);
    consume(&mut sim, 0, 1);
    // Two packets queued on CPU 1 at t=0: handled at 1000 and 2000.
    packet(&mut sim, 0);
    packet(&mut sim, 0);
    assert_eq!(hook_moves(&sim), [(None, 1)]);
    // The consumer moves to CPU 2 (another LLC): written under any rule.
    consume(&mut sim, 500, 2);
    // CPU 1 has handled nothing yet: the move is held back, the packet
    // joins the others on CPU 1 (handled at 3000).
    packet(&mut sim, 600);
    assert_eq!(sim.report().rx.held_back, 1);
    // At 2500 CPU 1 has handled two of the three: held back again (the
    // flow's last packet, handled at 4000 now, is still queued).
    packet(&mut sim, 2_500);
    assert_eq!(sim.report().rx.held_back, 2);
    assert_eq!(hook_moves(&sim), [(None, 1)]);
    // At 4000 the last one is handled: the flow moves, one hook call.
    packet(&mut sim, 4_000);
    assert_eq!(hook_moves(&sim), [(None, 1), (Some(1), 2)]);
    let r = sim.finish();
    assert_eq!((r.packets, r.steered_out, r.fast_path), (5, 5, 0));
    assert_eq!((r.rx.hook_calls, r.first_placements, r.moves), (2, 1, 1));
    assert_eq!(r.rx.held_back, 2);
    assert_eq!(r.deepest_ring, 3);
}

#[test]
fn fast_path_is_counted_and_switchable() {
    for fast_path in [true, false] {
        let mut sim = sim_with(Policy::LlcAffinity, fast_path);
        // Consumed on CPU 0, the dispatcher's own.
        consume(&mut sim, 0, 0);
        for t in 0..10 {
            packet(&mut sim, t * 10_000);
        }
        let r = sim.finish();
        if fast_path {
            assert_eq!((r.fast_path, r.queued_local), (10, 0));
        } else {
            assert_eq!((r.fast_path, r.queued_local), (0, 10));
        }
        assert_eq!((r.rx.hook_calls, r.steered_out), (1, 0));
    }
}

#[test]
fn a_held_back_flow_reaches_the_fast_path_only_once_it_may_move() {
    // 2 CPUs in one LLC, the rx queue dispatched on CPU 0.
    let cfg = SimConfig {
        workers: CpuSet::first(2),
        queues: 1,
        fast_path: true,
        service_ns: 1_000,
        ..SimConfig::default()
    };
    let layout = Arc::new(CpuLayout::uniform(2, 2).unwrap());
    let mut sim = Sim::new(cfg, layout).unwrap();
    // First consumed on CPU 1 (a new entry: written); its packet is
    // queued on CPU 1, handled at 1000.
    sim.apply(
        0,
        Event::Consume {
            hash: FLOW,
            cpu: 1,
            allowed: None,
        },
    )
    .unwrap();
    sim.apply(0, Event::Packet { hash: FLOW, rxq: 0 }).unwrap();
    // The consumer may now run only on CPU 0: forced to CPU 0.
    sim.apply(
        10,
        Event::Consume {
            hash: FLOW,
            cpu: 0,
            allowed: Some([0].into_iter().collect()),
        },
    )
    .unwrap();
    // Held back on CPU 1 until 1000 (queued there, not inline); then it
    // moves to CPU 0, the dispatcher's own: inline.
    sim.apply(20, Event::Packet { hash: FLOW, rxq: 0 }).unwrap();
    sim.apply(5_000, Event::Packet { hash: FLOW, rxq: 0 })
        .unwrap();
    let r = sim.finish();
    assert_eq!((r.steered_out, r.fast_path, r.rx.held_back), (2, 1, 1));
    assert_eq!(r.written(WriteReason::ForcedAffinity), 1);
}

#[test]
fn llc_rule_saves_hook_calls_under_migrating_consumers() {
    let run = |policy: Policy, consumer: ConsumerModel| {
        let cfg = SimConfig {
            workers: CpuSet::first(8),
            queues: 8,
            policy,
            rps: RpsMode::Local,
            consumer,
            seed: 42,
            ..SimConfig::default()
        };
        let layout = Arc::new(CpuLayout::uniform(8, 4).unwrap());
        let mut sim = Sim::new(cfg, layout).unwrap();
        // 64 flows, a packet each every 100 us for 100 ms.
        for step in 0..1_000u64 {
            for f in 0..64u32 {
                let hash = (f + 1).wrapping_mul(0x9E37_79B9);
                sim.apply(
                    step * 100_000 + u64::from(f),
                    Event::Packet { hash, rxq: f % 8 },
                )
                .unwrap();
            }
        }
        sim.finish()
    };
    let migrate = ConsumerModel::Migrate {
        period_ns: 1_000_000,
        same_llc: 0.9,
    };
    let always = run(Policy::Always, migrate);
    let llc = run(Policy::LlcAffinity, migrate);
    assert_eq!(always.packets, 64_000);
    assert_eq!(always.records, 64_000, "every handled packet is read");
    assert!(always.migrations > 500, "{}", always.migrations);
    assert!(llc.suppressed > 0 && always.suppressed == 0);
    assert!(
        llc.rx.hook_calls * 2 < always.rx.hook_calls,
        "llc {} vs always {}",
        llc.rx.hook_calls,
        always.rx.hook_calls
    );
    assert!(llc.updates() * 2 < always.updates());
    // Same input, same answer.
    assert_eq!(llc, run(Policy::LlcAffinity, migrate));
    // Consumers that never move: both rules make the same updates.
    let a = run(Policy::Always, ConsumerModel::Hash);
    let l = run(Policy::LlcAffinity, ConsumerModel::Hash);
    assert_eq!(a.rx.hook_calls, l.rx.hook_calls);
    assert_eq!((a.moves, a.first_placements), (64, 64));
}

#[test]
fn idle_flows_expire_and_are_placed_again() {
    let cfg = SimConfig {
        workers: CpuSet::first(2),
        queues: 1,
        flow_idle_ms: 10,
        rx_table_entries: 64,
        ..SimConfig::default()
    };
    let layout = Arc::new(CpuLayout::uniform(2, 2).unwrap());
    let mut sim = Sim::with_hooks(cfg, layout, |_| RecordingHook::default()).unwrap();
    sim.apply(0, Event::Packet { hash: FLOW, rxq: 0 }).unwrap();
    sim.apply(1_000_000, Event::Packet { hash: FLOW, rxq: 0 })
        .unwrap();
    // 50 ms idle: the entry expires, its filter is removed.
    sim.apply(51_000_000, Event::Packet { hash: FLOW, rxq: 0 })
        .unwrap();
    let hook = sim.rx_table(0).unwrap().hook().clone();
    let r = sim.finish();
    assert_eq!((r.rx.expired, r.rx.hook_removes), (1, 1));
    assert_eq!((r.first_placements, r.rx.hook_calls), (2, 2));
    assert_eq!((hook.steer_calls(), hook.remove_calls()), (2, 1));
    assert_eq!(r.duration_ns, 51_000_000);
}

#[test]
fn offline_cpus_are_passed_over() {
    let mut sim = sim_with(Policy::LlcAffinity, true);
    consume(&mut sim, 0, 3);
    packet(&mut sim, 0);
    sim.apply(
        10_000,
        Event::Online {
            cpu: 3,
            online: false,
        },
    )
    .unwrap();
    // CPU 3 drained its packet at 1000: the flow goes by RPS elsewhere.
    packet(&mut sim, 20_000);
    // The consumer shows up on CPU 2: CPU 3 offline forces the write.
    consume(&mut sim, 30_000, 2);
    packet(&mut sim, 40_000);
    let moves = hook_moves(&sim);
    assert_eq!(moves.first(), Some(&(None, 3)));
    assert_eq!(moves.last().map(|m| m.1), Some(2));
    assert!(moves.iter().skip(1).all(|m| m.1 != 3), "{moves:?}");
    let r = sim.finish();
    assert_eq!(r.written(WriteReason::ForcedOffline), 1);
}

#[test]
fn bad_settings_and_events_are_errors() {
    let layout = Arc::new(CpuLayout::uniform(2, 2).unwrap());
    let bad = |cfg: SimConfig| Sim::new(cfg, layout.clone()).unwrap_err();
    assert!(matches!(
        bad(SimConfig {
            workers: CpuSet::new(),
            ..SimConfig::default()
        }),
        SimError::BadWorkers(_)
    ));
    assert!(matches!(
        bad(SimConfig {
            workers: [5].into_iter().collect(),
            ..SimConfig::default()
        }),
        SimError::BadWorkers(_)
    ));
    assert!(matches!(
        bad(SimConfig {
            queues: 0,
            ..SimConfig::default()
        }),
        SimError::BadSize(_)
    ));
    assert!(matches!(
        bad(SimConfig {
            desired_entries: 1000,
            ..SimConfig::default()
        }),
        SimError::Table(_)
    ));
    let mut sim = Sim::new(SimConfig::default(), layout).unwrap();
    assert_eq!(
        sim.apply(0, Event::Packet { hash: 1, rxq: 1 }),
        Err(SimError::NoSuchQueue { rxq: 1, queues: 1 })
    );
    assert_eq!(
        sim.apply(
            0,
            Event::Consume {
                hash: 1,
                cpu: 2,
                allowed: None
            }
        ),
        Err(SimError::NoSuchCpu { cpu: 2, nr_cpus: 2 })
    );
    assert_eq!(
        sim.apply(
            0,
            Event::Consume {
                hash: 0,
                cpu: 0,
                allowed: None
            }
        ),
        Err(SimError::NoHash)
    );
    // Time never runs backwards; hash 0 is a packet without a flow.
    sim.apply(100, Event::Packet { hash: 0, rxq: 0 }).unwrap();
    sim.apply(50, Event::Packet { hash: 0, rxq: 0 }).unwrap();
    let r = sim.finish();
    // The refused events started the clock at 0.
    assert_eq!((r.no_flow, r.flows, r.duration_ns), (2, 0, 100));
}
