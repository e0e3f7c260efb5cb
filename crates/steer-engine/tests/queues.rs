//! Rx queues and worker CPUs in other numbers than one each: 4 queues on
//! 2 workers (each worker dispatches two), 1 queue on 2 workers (every
//! flow dispatched from one CPU, spread over both by hash), 2 queues on 1
//! worker (one CPU dispatches and handles everything). Each is an echo
//! under many flows: every datagram answered, in order per flow, every
//! frame accounted for at stop. Also what the start-time check of the NIC
//! setup says on veth. Needs root, as CI runs it.

mod support;

use steer_core::cpu::CpuSet;
use steer_core::policy::Policy;
use steer_engine::engine::{EngineBuilder, EngineStats};
use steer_testbed::TestNet;
use support::{assert_accounted, drive_flows, echo_builder};

/// Runs `flows` flows through the engine `builder` starts; checks order and
/// accounting; returns the final counters.
fn echo_checked(net: &TestNet, builder: EngineBuilder, flows: usize) -> EngineStats {
    let engine = builder.start().expect("engine starts");
    let per_flow = 100;
    let got = drive_flows(net, flows, per_flow, 20);
    let report = engine.stop().unwrap();
    for (i, seqs) in got.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "flow {i} reordered: {seqs:?}"
        );
        assert_eq!(
            seqs.len(),
            per_flow as usize,
            "flow {i} lost replies\n{}",
            report.stats.table(None)
        );
    }
    let t = &report.stats.total;
    let sent = flows as u64 * u64::from(per_flow);
    assert_eq!(t.core.rx, sent, "{}", report.stats.table(None));
    assert_eq!(t.engine.tx, sent);
    assert_accounted(&report);
    report.stats
}

fn cpus() -> Vec<usize> {
    let c: Vec<usize> = steer_topology::Topology::live()
        .unwrap()
        .online_cpus()
        .iter()
        .collect();
    assert!(c.len() >= 2, "needs two CPUs");
    c
}

fn row(stats: &EngineStats, cpu: usize) -> steer_core::stats::LocalStats {
    stats.per_cpu.iter().find(|r| r.cpu == cpu).unwrap().core
}

#[test]
fn four_rx_queues_on_two_workers() {
    let c = cpus();
    let net = TestNet::with_queues(4);
    let builder = echo_builder(&net, Policy::LlcAffinity, true)
        .cpus(CpuSet::from_iter(c[..2].iter().copied()));
    let stats = echo_checked(&net, builder, 16);
    // Each worker dispatches two of the queues and handles its flows.
    for &cpu in &c[..2] {
        assert!(row(&stats, cpu).rx > 0, "{}", stats.table(None));
        assert!(row(&stats, cpu).processed > 0, "{}", stats.table(None));
    }
}

#[test]
fn one_rx_queue_on_two_workers() {
    let c = cpus();
    let net = TestNet::with_queues(1);
    let builder = echo_builder(&net, Policy::LlcAffinity, true)
        .cpus(CpuSet::from_iter(c[..2].iter().copied()));
    let stats = echo_checked(&net, builder, 16);
    // Every frame dispatched on the first CPU, the flows spread over both.
    assert_eq!(
        row(&stats, c[0]).rx,
        stats.total.core.rx,
        "{}",
        stats.table(None)
    );
    assert_eq!(row(&stats, c[1]).rx, 0);
    assert!(row(&stats, c[1]).processed > 0, "{}", stats.table(None));
    assert!(row(&stats, c[1]).steered_in > 0, "{}", stats.table(None));
}

#[test]
fn two_rx_queues_on_one_worker() {
    let c = cpus();
    let net = TestNet::new();
    let builder = echo_builder(&net, Policy::LlcAffinity, true).cpus(CpuSet::from_iter([c[1]]));
    let stats = echo_checked(&net, builder, 16);
    // One CPU dispatched both queues and handled everything.
    let only = row(&stats, c[1]);
    assert_eq!(only.rx, stats.total.core.rx, "{}", stats.table(None));
    assert_eq!(only.processed, stats.total.core.rx);
    assert!(
        stats
            .per_cpu
            .iter()
            .all(|r| r.cpu == c[1] || r.core.processed == 0),
        "{}",
        stats.table(None)
    );
}

#[test]
fn the_nic_setup_check_says_what_veth_cannot_show() {
    let net = TestNet::new();
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .start()
        .unwrap();
    let w = engine.start_warnings().to_vec();
    engine.stop().unwrap();
    // veth: both queues opened (nothing left without a socket), no RSS
    // table and no queue interrupts to check.
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].contains("no RSS indirection table") && w[0].contains("ethtool -X"),
        "{w:#?}"
    );
    assert!(w[1].contains("smp_affinity_list"), "{w:#?}");
    // Opening one of the two queues leaves the other without a socket.
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .queues([0])
        .start()
        .unwrap();
    let w = engine.start_warnings().to_vec();
    engine.stop().unwrap();
    assert!(
        w.iter()
            .any(|l| l.contains("rx queues 1 have no steer socket")),
        "{w:#?}"
    );
}
