//! The load balancer in the engine on a 2-queue veth pair: with a handler
//! that costs CPU time, the balancer runs its rounds, workers count their
//! busy time, every datagram is still answered in order, the switch works
//! at run time, and the counters reach the stats and their JSON. Needs
//! root, as CI runs it.

mod support;

use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{PacketContext, Verdict};
use support::net::TestNet;
use support::{assert_accounted, drive_flows, echo_builder};

/// A handler that spends 20 us of CPU on each packet, then echoes it.
fn costly(p: &mut [u8], _: &PacketContext) -> Verdict {
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(20) {
        std::hint::spin_loop();
    }
    match echo_in_place(p, EchoMode::Plain) {
        Ok(len) => Verdict::Transmit(len),
        Err(_) => Verdict::Drop,
    }
}

#[test]
fn the_balancer_runs_beside_the_echo_and_switches_at_run_time() {
    let net = TestNet::new();
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .balance(true)
        .handler(|_cpu| Box::new(costly))
        .start()
        .expect("engine starts on the test veth");
    let (flows, per_flow) = (8, 200);
    let got = drive_flows(&net, flows, per_flow, 20);
    for (i, seqs) in got.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "flow {i} reordered: {seqs:?}"
        );
        assert_eq!(seqs.len(), per_flow as usize, "flow {i} lost replies");
    }
    let on = engine.stats();
    assert!(on.balance.on);
    assert!(on.balance.rounds > 0, "{:?}", on.balance);
    // 1600 packets x 20 us: at least 32 ms of work, counted as busy time.
    let busy: u64 = on.per_cpu.iter().map(|r| r.core.busy_ns).sum();
    assert!(busy >= 32_000_000, "busy {busy} ns");
    assert!(on.load_max_over_mean(None) >= 1.0);
    let json = on.to_json_value();
    assert_eq!(json["balancer"]["on"], true);
    assert!(json["balancer"]["moves_by_reason"]["same_llc"].is_u64());
    assert!(json["worker_load"]["max_over_mean"].is_f64());
    assert!(on.table(None).contains("balancer on"));

    engine.set_balance(false);
    let rounds = engine.stats().balance.rounds;
    std::thread::sleep(Duration::from_millis(50));
    let off = engine.stats();
    assert!(!off.balance.on);
    // At most the round in flight when it was switched off.
    assert!(off.balance.rounds <= rounds + 1, "{:?}", off.balance);
    let got = drive_flows(&net, flows, 50, 10);
    assert!(got
        .iter()
        .all(|g| g.windows(2).all(|w| w[0] < w[1]) && g.len() == 50));
    let report = engine.stop().unwrap();
    assert_accounted(&report);
}
