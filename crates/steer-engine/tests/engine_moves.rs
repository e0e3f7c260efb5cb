//! Replies stay in order while a run-to-completion handler moves its flows
//! between the workers: the echo on a 2-queue veth pair, 2 workers, clients
//! keeping a window of numbered datagrams in flight on 16 flows, and a
//! handler that records or pins one packet's flow in 8 to a random worker
//! (policy `always`, so every record moves the flow). Every reply is checked
//! for order; with the fast path on (flows run inline and move off the
//! dispatcher's CPU) and off (every packet through a ring). In its own test
//! binary so nothing else competes for the 2 CPUs. `STEER_MOVES_SECS` sets
//! the seconds per run (default 3).

mod support;

use std::time::Duration;

use steer_core::policy::Policy;
use steer_engine::engine::Engine;
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::ordered::{self, Load, MovingEcho};
use support::{assert_accounted, PORT};

#[test]
fn replies_stay_in_order_while_handlers_move_their_flows_between_workers() {
    let secs: u64 = std::env::var("STEER_MOVES_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for fast_path in [true, false] {
        let net = TestNet::new();
        let engine = Engine::builder(&net.host)
            .own(Proto::Udp, PORT)
            .policy(Policy::Always)
            .fast_path(fast_path)
            .frames(4096, 512)
            .handler(|cpu| Box::new(MovingEcho::new(cpu, 8, &[0, 1])))
            .start()
            .expect("engine starts on the test veth");
        // Rounds of `secs` until there was enough traffic and enough moves
        // to mean something: a loaded machine gets more rounds (at most 10),
        // not a weaker check. Order is checked in every round.
        let mut load = ordered::LoadReport::default();
        for _ in 0..10 {
            let round = ordered::run(
                &net,
                &Load {
                    threads: 2,
                    flows_per_thread: 8,
                    window: 32,
                    burst: 0,
                    burst_every: Duration::ZERO,
                    duration: Duration::from_secs(secs),
                },
            );
            load.sent += round.sent;
            load.answered += round.answered;
            load.reordered += round.reordered;
            load.duplicated += round.duplicated;
            let moves = engine.stats().total.core.hook_calls;
            if load.answered >= 1_000 * secs && moves >= 100 * secs {
                break;
            }
        }
        let report = engine.stop().unwrap();
        let t = &report.stats.total;
        eprintln!(
            "fast path {fast_path}: {load:?}; moves {}, held back {}, drops {}\n{}",
            t.core.hook_calls,
            t.core.held_back,
            t.drops(),
            report.stats.table(None)
        );
        assert_eq!(
            (load.reordered, load.duplicated),
            (0, 0),
            "fast path {fast_path}: replies out of order: {load:?}"
        );
        assert!(
            load.answered >= 1_000 * secs,
            "fast path {fast_path}: too little load to mean anything: {load:?}"
        );
        assert!(
            t.core.hook_calls >= 100 * secs,
            "fast path {fast_path}: the handler moved too few flows ({} moves)",
            t.core.hook_calls
        );
        assert_accounted(&report);
    }
}
