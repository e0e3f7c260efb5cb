//! The load balancer in the engine on a 2-queue veth pair: with a handler
//! that costs CPU time, the balancer runs its rounds, workers count their
//! busy time, every datagram is still answered in order, the switch works
//! at run time, and the counters reach the stats and their JSON; and with
//! flows that all hash to one worker, the balancer moves some to the idle
//! one (moves counted, its share of the packets real, order kept). Needs
//! root, as CI runs it.

mod support;

use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{PacketContext, Verdict};
use steer_testbed::TestNet;
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

/// Eight flows whose hash puts every one of them on CPU 0 (RPS over CPUs 0
/// and 1 with a known hasher), each packet costing 20 us: CPU 0 is loaded,
/// CPU 1 idle. The balancer moves flows nobody claimed off the loaded
/// worker: moves are counted, CPU 1 handles packets it would never have
/// got by hash, and every flow's replies still come back in order.
#[test]
fn the_balancer_moves_unclaimed_flows_off_a_loaded_worker() {
    use std::net::{SocketAddr, UdpSocket};

    use steer_core::cpu::CpuSet;
    use steer_core::flow::{FlowHasher, KeyedHasher};
    use support::{peer_udp_key, PORT};

    let net = TestNet::new();
    let hasher = KeyedHasher::with_seed(0x5eed);
    let rps_cpu =
        |port: u16| ((u64::from(hasher.hash(&peer_udp_key(&net, port))) * 2) >> 32) as usize;
    let ports: Vec<u16> = (31000u16..).filter(|&p| rps_cpu(p) == 0).take(8).collect();
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .cpus(CpuSet::first(2))
        // Placement by hash over both CPUs, whichever queue a packet came
        // in on (with a queue per CPU the default is each queue's own CPU).
        .rps(steer_engine::engine::RpsMode::Spread)
        .hasher(hasher)
        .balance(true)
        .handler(|_cpu| Box::new(costly))
        .start()
        .expect("engine starts on the test veth");

    // Bursts of 10 a flow for 3 s: about 50% of CPU 0 by hash alone.
    let got: Vec<Vec<u32>> = net.in_ns(|| {
        let to = SocketAddr::new(net.host_v4.into(), PORT);
        let sockets: Vec<UdpSocket> = ports
            .iter()
            .map(|&p| {
                let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), p)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                s
            })
            .collect();
        let mut got = vec![Vec::new(); sockets.len()];
        let mut seq = 0u32;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            for s in &sockets {
                for k in seq..seq + 10 {
                    s.send_to(&k.to_be_bytes(), to).unwrap();
                }
            }
            for (i, s) in sockets.iter().enumerate() {
                let mut buf = [0u8; 64];
                for _ in 0..10 {
                    match s.recv_from(&mut buf) {
                        Ok((4, _)) => got[i].push(u32::from_be_bytes(buf[..4].try_into().unwrap())),
                        _ => break,
                    }
                }
            }
            seq += 10;
        }
        got
    });
    for (i, seqs) in got.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "flow {i} reordered: {seqs:?}"
        );
        assert!(!seqs.is_empty(), "flow {i} got nothing back");
    }
    let stats = engine.stats();
    assert!(stats.balance.moves() > 0, "{:?}", stats.balance);
    let on_cpu1 = stats
        .per_cpu
        .iter()
        .find(|r| r.cpu == 1)
        .map_or(0, |r| r.core.processed);
    let total: u64 = stats.per_cpu.iter().map(|r| r.core.processed).sum();
    let shares: Vec<_> = stats
        .per_cpu
        .iter()
        .map(|r| (r.cpu, r.core.processed))
        .collect();
    // By hash alone CPU 1 gets none of it; moved flows give it a real share.
    assert!(
        on_cpu1 * 10 >= total,
        "CPU 1's share is too small: {shares:?}"
    );
    assert!(
        stats.load_max_over_mean(None) < 1.9,
        "still as lopsided as by hash: {shares:?}"
    );
    let report = engine.stop().unwrap();
    assert_accounted(&report);
}
