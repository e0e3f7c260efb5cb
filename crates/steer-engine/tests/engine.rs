//! The engine end to end on a 2-queue veth pair: the UDP echo over IPv4 and
//! IPv6 with many flows under both policies and with the fast path on and
//! off (every datagram answered, in order per flow, every frame back at
//! stop); malformed and foreign frames at the owned port. of a bad start. Needs root, as CI runs it.

mod support;

use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use support::net::TestNet;
use support::{assert_accounted, drive_flows, echo_engine, malformed_frames, send_raw};

#[test]
fn echo_answers_every_datagram_in_order_per_flow_under_each_policy_and_fast_path() {
    for (policy, fast_path) in [(Policy::LlcAffinity, true), (Policy::Always, false)] {
        let net = TestNet::new();
        let engine = echo_engine(&net, policy, fast_path);
        let (flows, per_flow) = (8, 300);
        let got = drive_flows(&net, flows, per_flow, 25);
        let stats = engine.stats();
        let report = engine.stop().unwrap();
        for (i, seqs) in got.iter().enumerate() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "{policy:?}/fast {fast_path}: flow {i} reordered: {seqs:?}"
            );
            assert_eq!(
                seqs.len(),
                per_flow as usize,
                "{policy:?}/fast {fast_path}: flow {i} lost replies; stats\n{}",
                stats.table(None)
            );
        }
        let t = &report.stats.total;
        let sent = (flows as u64) * u64::from(per_flow);
        assert_eq!(t.core.rx, sent, "{}", report.stats.table(None));
        assert_eq!(t.engine.tx, sent);
        if fast_path {
            assert!(t.core.fast_path > 0, "some flows are served inline");
        } else {
            assert_eq!(t.core.fast_path, 0);
        }
        assert_accounted(&report);
    }
}

/// The `se.slice` (ns) of every steer worker thread of this process.
fn worker_slices() -> Vec<u64> {
    let mut slices = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("steer-worker") {
            continue;
        }
        let sched = std::fs::read_to_string(task.path().join("sched")).unwrap_or_default();
        if let Some(v) = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
        {
            slices.push(v.trim().parse().unwrap());
        }
    }
    slices
}

#[test]
fn workers_ask_for_a_short_scheduling_slice_unless_told_not_to() {
    let net = TestNet::new();
    // Other tests' engines (default slice) may run beside this one; only
    // this test starts workers with the kernel's default.
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let slices = worker_slices();
    assert!(slices.len() >= 2, "{slices:?}");
    assert!(slices.iter().all(|&s| s == 100_000), "{slices:?}");
    engine.stop().unwrap();

    let engine = support::echo_builder(&net, Policy::LlcAffinity, true)
        .worker_slice(None)
        .start()
        .unwrap();
    let kernel_default = worker_slices().iter().filter(|&&s| s != 100_000).count();
    assert!(kernel_default >= 2, "{:?}", worker_slices());
    engine.stop().unwrap();
}

#[test]
fn malformed_and_foreign_frames_at_the_owned_port_are_counted_never_fatal() {
    let net = TestNet::new();
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let bad = malformed_frames(&net);
    for _ in 0..50 {
        send_raw(&net, &bad);
    }
    // The engine still serves.
    let got = drive_flows(&net, 2, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let states = engine.worker_states();
    assert!(
        states.iter().all(|(_, s)| *s == WorkerState::Running),
        "{states:?}"
    );
    let program = engine.program_stats().unwrap();
    let report = engine.stop().unwrap();
    let t = &report.stats.total;
    // What the program redirected, the engine received; the bad part of it
    // was dropped with a counter (malformed, or refused by the echo).
    assert_eq!(t.core.rx, program.redirected, "{program:?} {t:?}");
    assert_eq!(t.engine.tx, 40);
    assert!(t.drops() > 0, "{t:?}");
    assert_accounted(&report);
}
