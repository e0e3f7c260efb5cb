//! A handler panics on a marker payload. One marker restarts its worker in
//! place: every CPU still echoes, in order, and the restart shows in the
//! live stats and the metrics (`steer_worker_restarts_total`). Then the
//! marker is sent on many flows until every worker is past its restart
//! limit (5 a minute) and has died. Each death shows in the live stats and
//! the metrics (`steer_worker_up`, `steer_worker_deaths_total`, 5 restarts
//! per CPU before it); with every worker gone
//! the default fails open, so datagrams to the owned port reach a kernel
//! socket on it, and `WorkerLoss::FailClosed` instead says so through
//! `Engine::workers_lost`. Needs root and two CPUs.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{Engine, PacketContext, Verdict, WorkerLoss};
use steer_engine::observe::metrics;
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::{drive_flows, PORT};

const MARKER: &[u8] = b"PANIC";

fn engine(net: &TestNet, on_loss: WorkerLoss) -> Engine {
    Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .policy(Policy::LlcAffinity)
        .frames(4096, 512)
        .stats_dir(std::env::temp_dir().join(format!("steer-loss-{}", std::process::id())))
        .on_worker_loss(on_loss)
        .handler(|_cpu| {
            Box::new(|p: &mut [u8], _: &PacketContext| {
                // The UDP payload of an untagged IPv4 frame starts at 42.
                if p.get(42..42 + MARKER.len()) == Some(MARKER) {
                    panic!("marker payload");
                }
                match echo_in_place(p, EchoMode::Plain) {
                    Ok(len) => Verdict::Transmit(len),
                    Err(_) => Verdict::Drop,
                }
            })
        })
        .start()
        .expect("engine starts on the test veth")
}

/// Sends the marker from new flows until every worker is dead (10 s at
/// most).
fn kill_every_worker(net: &TestNet, engine: &Engine) {
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine
        .worker_states()
        .iter()
        .any(|(_, s)| *s == steer_core::runtime::WorkerState::Running)
    {
        assert!(
            Instant::now() < deadline,
            "workers still alive: {:?}",
            engine.worker_states()
        );
        net.in_ns(|| {
            for _ in 0..8 {
                let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
                s.send_to(MARKER, to).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Datagrams to the owned port that a kernel socket bound on it received.
fn kernel_receives(net: &TestNet, n: usize) -> usize {
    let kernel = UdpSocket::bind(SocketAddr::new(net.host_v4.into(), PORT)).unwrap();
    kernel
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    net.in_ns(|| {
        let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        for i in 0..n {
            s.send_to(format!("after the loss {i}").as_bytes(), to)
                .unwrap();
        }
    });
    let mut buf = [0u8; 256];
    let mut got = 0;
    while kernel.recv_from(&mut buf).is_ok() {
        got += 1;
    }
    got
}

#[test]
fn a_panicking_handler_restarts_its_worker_and_every_cpu_still_echoes() {
    let net = TestNet::new();
    let engine = engine(&net, WorkerLoss::FailClosed);
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    net.in_ns(|| {
        let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        s.send_to(MARKER, to).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine
        .live_stats()
        .workers
        .iter()
        .map(|w| w.restarts)
        .sum::<u32>()
        == 0
    {
        assert!(Instant::now() < deadline, "no restart seen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = engine.live_stats();
    // 32 flows over both CPUs: every datagram answered, in order.
    let got = drive_flows(&net, 32, 20, 5);
    for (i, seqs) in got.iter().enumerate() {
        assert_eq!(*seqs, (0..20).collect::<Vec<u32>>(), "flow {i}");
    }
    let after = engine.live_stats();
    for (b, a) in before.per_cpu.iter().zip(&after.per_cpu) {
        assert!(
            a.core.processed > b.core.processed,
            "cpu {} served nothing after the restart",
            a.cpu
        );
    }
    assert!(after.workers.iter().all(|w| w.up), "{:?}", after.workers);
    let restarted: Vec<_> = after.workers.iter().filter(|w| w.restarts > 0).collect();
    assert_eq!(restarted.len(), 1, "{:?}", after.workers);
    assert_eq!(restarted[0].restarts, 1);
    assert!(restarted[0]
        .panic
        .as_deref()
        .is_some_and(|p| p.contains("marker")));
    let text = metrics::encode(&after).unwrap();
    assert_eq!(
        steer_testbed::http::metric_sum(&text, "steer_worker_restarts_total"),
        1,
        "{text}"
    );
    assert!(text.contains("steer_worker_deaths_total 0"), "{text}");
    assert!(!engine.workers_lost());
    drop(engine.stop());
}

#[test]
fn with_every_worker_dead_the_kernel_gets_the_traffic_and_the_counters_say_so() {
    let net = TestNet::new();
    let engine = engine(&net, WorkerLoss::FailOpen);
    assert!(!engine.workers_lost());
    let workers = engine.worker_states().len();
    kill_every_worker(&net, &engine);

    // The health watcher looks every 100 ms.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !engine.workers_lost() {
        assert!(Instant::now() < deadline, "the loss was not noticed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = engine.live_stats();
    assert_eq!(live.workers.len(), workers);
    assert!(
        live.workers
            .iter()
            .all(|w| !w.up && w.panic.as_deref().is_some_and(|p| p.contains("marker"))),
        "{:?}",
        live.workers
    );
    let text = metrics::encode(&live).unwrap();
    assert!(
        text.contains(&format!("steer_worker_deaths_total {workers}")),
        "{text}"
    );
    assert!(text.contains("steer_worker_up{cpu=\"0\"} 0"), "{text}");
    // Each was restarted five times (the default limit a minute) first.
    for w in &live.workers {
        let line = format!("steer_worker_restarts_total{{cpu=\"{}\"}} 5", w.cpu);
        assert!(text.contains(&line), "{text}");
    }

    // Failed open: the kernel's socket on the port gets what follows.
    assert_eq!(kernel_receives(&net, 20), 20);
    drop(engine.stop());
}

#[test]
fn failing_closed_leaves_the_traffic_and_tells_the_caller() {
    let net = TestNet::new();
    let engine = engine(&net, WorkerLoss::FailClosed);
    kill_every_worker(&net, &engine);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !engine.workers_lost() {
        assert!(Instant::now() < deadline, "the loss was not noticed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Not failed open: the program still redirects to the engine's sockets.
    assert_eq!(kernel_receives(&net, 10), 0);
    drop(engine.stop());
}
