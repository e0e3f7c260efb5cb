//! The load model's and the balancer's promises: no flow ever has two
//! owners, an idle system makes no moves, a balanced one stays put, pins and
//! application CPUs never move, moves wait for the old queue, the balancer
//! beats hash placement on skewed load, and runs are deterministic.

use proptest::prelude::*;

use super::*;

fn layout(n: usize, per_llc: usize) -> Arc<CpuLayout> {
    Arc::new(CpuLayout::uniform(n, per_llc).unwrap())
}

fn cfg(workers: usize, secs: f64) -> LoadConfig {
    LoadConfig {
        workers: CpuSet::first(workers),
        duration_ns: (secs * 1e9) as u64,
        warmup_ns: (secs * 0.5e9) as u64,
        balance: Some(BalanceConfig::default()),
        ..LoadConfig::default()
    }
}

/// Flows whose hashes put exactly `per_worker` of them on each worker
/// under RPS spread, with the given sizes repeated on every worker.
fn even_spread(workers: usize, sizes: &[f64]) -> Workload {
    let mut flows = Vec::new();
    for w in 0..workers {
        for (i, &size) in sizes.iter().enumerate() {
            // The lowest hash RPS maps to worker w, plus a distinct offset.
            let base = ((w as u64) << 32).div_ceil(workers as u64) as u32;
            flows.push(FlowSpec {
                hash: base + 1 + (w * sizes.len() + i) as u32,
                rate_pps: size,
                cost_ns: 1000.0,
                placement: Placement::Hash,
            });
        }
    }
    Workload { flows }
}

#[test]
fn balancer_beats_hash_placement_on_zipf_flows() {
    let w = Workload::zipf(800, 1.1, 10_000, 1e6, Cost::Fixed(1000.0), 5);
    let (hash, bal) = run_pair(&cfg(8, 3.0), BalanceConfig::default(), &w, layout(8, 4)).unwrap();
    assert!(hash.max_over_mean > 1.2, "{hash:?}");
    assert!(bal.max_over_mean <= 1.10, "{bal:?}");
    assert!(bal.moves > 0 && hash.moves == 0);
    assert!(bal.window_moved_flows_pct_per_s < 1.0, "{bal:?}");
    // Same arrivals: the same total work.
    assert!((hash.mean_load - bal.mean_load).abs() < 1e-9);
}

#[test]
fn elephants_stay_and_the_rest_leave_their_workers() {
    let mut w = Workload::uniform(400, 1e6, Cost::Fixed(1000.0), 2);
    w.add_elephants(2, 0.3, Cost::Fixed(1000.0), 2).unwrap();
    let (hash, bal) = run_pair(&cfg(4, 3.0), BalanceConfig::default(), &w, layout(4, 4)).unwrap();
    // Each elephant is 30 % of all work: 1.2 times a worker's fair share.
    assert_eq!(bal.elephants, 2, "{bal:?}");
    assert!((bal.bound - 1.2).abs() < 0.05, "{bal:?}");
    assert!(bal.max_over_mean < hash.max_over_mean);
    assert!(bal.max_over_mean <= bal.bound * 1.05, "{bal:?}");
}

/// A hog pinned to `cpu` and 40 movable flows that RPS spread puts there
/// too (of 2 workers: hashes below 2^31 go to CPU 0, above to CPU 1).
fn hogged(cpu: CpuId) -> Workload {
    let mut w = Workload::default();
    w.flows.push(FlowSpec {
        hash: 7,
        rate_pps: 2_000_000.0,
        cost_ns: 1000.0,
        placement: Placement::Pin(cpu),
    });
    for i in 0..40u32 {
        w.flows.push(FlowSpec {
            hash: (cpu as u32) << 31 | (0x100 + i * 2),
            rate_pps: 50_000.0,
            cost_ns: 1000.0,
            placement: Placement::Hash,
        });
    }
    w
}

#[test]
fn a_move_waits_while_the_old_queue_holds_the_units_packets() {
    // CPU 1 is hopelessly overloaded by a pinned flow: its queue stays
    // full. Its movable units come from the one rx queue, dispatched on
    // CPU 0, through a ring: none can leave without overtaking.
    let cfg = LoadConfig {
        rps: RpsMode::Spread,
        queues: 1,
        load: None,
        ..cfg(2, 1.0)
    };
    let r = run(&cfg, &hogged(1), layout(2, 2)).unwrap();
    assert!(r.held_steps > 0, "{r:?}");
    assert_eq!(r.moves, 0, "{r:?}");
    // On the dispatcher's own CPU the same units run inline, queue nothing
    // and leave at once.
    let r = run(&cfg, &hogged(0), layout(2, 2)).unwrap();
    assert!(r.moves > 0, "{r:?}");
    assert_eq!(r.held_steps, 0, "{r:?}");
}

#[test]
fn runs_are_deterministic() {
    let w = Workload::parse("zipf flows=300 s=1.1\nelephants flows=1 share=0.05", 3).unwrap();
    let c = LoadConfig {
        churn_per_s: 0.05,
        ..cfg(4, 1.0)
    };
    let a = run(&c, &w, layout(4, 2)).unwrap();
    let b = run(&c, &w, layout(4, 2)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_settings_are_refused() {
    let w = Workload::uniform(4, 1e3, Cost::default(), 1);
    let l = layout(2, 2);
    let no_workers = LoadConfig {
        workers: CpuSet::new(),
        ..cfg(2, 1.0)
    };
    assert!(matches!(
        run(&no_workers, &w, l.clone()),
        Err(LoadError::BadWorkers(_))
    ));
    let outside = LoadConfig {
        workers: "0,5".parse().unwrap(),
        ..cfg(2, 1.0)
    };
    assert!(matches!(
        run(&outside, &w, l.clone()),
        Err(LoadError::BadWorkers(_))
    ));
    let warm = LoadConfig {
        warmup_ns: 2_000_000_000,
        ..cfg(2, 1.0)
    };
    assert!(matches!(
        run(&warm, &w, l.clone()),
        Err(LoadError::BadSetting(_))
    ));
    let pinned = Workload::parse("flow rate=1 pin=1", 1).unwrap();
    let one = LoadConfig {
        workers: CpuSet::first(1),
        ..cfg(1, 1.0)
    };
    assert_eq!(run(&one, &pinned, l).unwrap_err(), LoadError::NoWorker(1));
}

fn placement() -> impl Strategy<Value = u8> {
    prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the workload, at every step every flow is in exactly one
    /// unit on one worker, the work the units queued is the work the
    /// workers took, and pinned and app-consumed flows never leave their
    /// CPU; the owners only change at completed moves.
    #[test]
    fn no_flow_ever_has_two_owners_and_claims_win(
        workers in 1usize..6,
        flows in proptest::collection::vec((1u32.., 1.0f64..1000.0, 200.0f64..3000.0, placement(), 0usize..6), 1..80),
        spread in any::<bool>(),
        churn in prop_oneof![Just(0.0f64), 0.0f64..0.5],
        seed in any::<u64>(),
    ) {
        let w = Workload {
            flows: flows
                .iter()
                .map(|&(hash, size, cost, p, cpu)| FlowSpec {
                    hash,
                    rate_pps: size,
                    cost_ns: cost,
                    placement: match p {
                        0 => Placement::Hash,
                        1 => Placement::Pin(cpu % workers),
                        _ => Placement::App(cpu % workers),
                    },
                })
                .collect(),
        };
        let c = LoadConfig {
            rps: if spread { RpsMode::Spread } else { RpsMode::Local },
            churn_per_s: churn,
            seed,
            load: Some(0.8),
            interval_ns: 2_000_000,
            ..cfg(workers, 0.3)
        };
        let mut m = LoadModel::new(c, &w, layout(workers, 2)).unwrap();
        let mut before = m.owners();
        let mut moves = 0;
        while m.now_ns() < m.cfg.duration_ns {
            m.step();
            prop_assert_eq!(m.check(), Ok(()));
            let owners = m.owners();
            for (i, f) in w.flows.iter().enumerate() {
                if let Placement::Pin(c) | Placement::App(c) = f.placement {
                    prop_assert_eq!(owners[i], c);
                }
            }
            let report = m.report();
            if report.moves == moves && churn == 0.0 {
                prop_assert_eq!(&owners, &before, "owners changed without a move");
            }
            moves = report.moves;
            before = owners;
        }
    }

    /// Below the idle threshold nothing moves, however skewed.
    #[test]
    fn an_idle_system_makes_no_moves(
        workers in 2usize..9,
        s in 0.8f64..2.0,
        flows in 1usize..300,
        seed in any::<u64>(),
    ) {
        let w = Workload::zipf_rank(flows, s, 1e3, Cost::Fixed(1000.0), seed);
        let c = LoadConfig { load: Some(0.01), seed, ..cfg(workers, 0.5) };
        let r = run(&c, &w, layout(workers, 4)).unwrap();
        prop_assert_eq!(r.moves, 0);
    }

    /// Workers that carry the same load (by construction) keep their flows.
    #[test]
    fn a_balanced_system_stays_put(
        workers in 2usize..9,
        sizes in proptest::collection::vec(1.0f64..100.0, 1..12),
        load in 0.1f64..0.95,
    ) {
        let w = even_spread(workers, &sizes);
        let c = LoadConfig {
            rps: RpsMode::Spread,
            poisson: false,
            load: Some(load),
            ..cfg(workers, 0.5)
        };
        let r = run(&c, &w, layout(workers, 4)).unwrap();
        prop_assert!(r.max_over_mean < 1.001, "{:?}", r);
        prop_assert_eq!(r.moves, 0);
    }

    /// The balancer never plans a move of a unit it was told is not
    /// movable, and never moves a unit twice within its cooldown.
    #[test]
    fn the_balancer_moves_only_movable_units_and_no_ping_pong(
        rounds in proptest::collection::vec(
            proptest::collection::vec((0u64..40, 0usize..4, 0u64..500, any::<bool>()), 1..40),
            1..30,
        ),
    ) {
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let cfg = BalanceConfig { smoothing: 1.0, cooldown_rounds: 10, ..Default::default() };
        let mut b = Balancer::new(cfg);
        let mut last_move: HashMap<UnitId, u64> = HashMap::new();
        for (r, units) in rounds.iter().enumerate() {
            // One sample per unit id; a unit's movability is fixed by its id.
            let mut seen = HashSet::new();
            let samples: Vec<UnitSample> = units
                .iter()
                .filter(|u| seen.insert(u.0))
                .map(|&(id, cpu, packets, _)| UnitSample { id, cpu, packets, movable: id % 3 != 0 })
                .collect();
            let mut busy = [0u64; 4];
            let mut packets = [0u64; 4];
            for s in &samples {
                busy[s.cpu] += s.packets * 1000;
                packets[s.cpu] += s.packets;
            }
            let workers: Vec<WorkerSample> = (0..4)
                .map(|cpu| WorkerSample { cpu, busy_ns: busy[cpu], packets: packets[cpu] })
                .collect();
            let plan = b.plan(&Round { interval_ns: 1_000_000, workers: &workers, units: &samples }, &layout);
            for m in &plan.moves {
                prop_assert!(m.unit % 3 != 0, "moved an unmovable unit: {:?}", m);
                if let Some(&at) = last_move.get(&m.unit) {
                    prop_assert!(r as u64 - at >= 10, "unit {} moved at {} and {}", m.unit, at, r);
                }
                last_move.insert(m.unit, r as u64);
                prop_assert!(m.from != m.to);
            }
        }
    }
}
