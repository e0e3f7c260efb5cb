//! Losing workers fails loudly, then open (or closed). A handler panics on
//! a marker payload; the marker is sent on many flows until every worker
//! has died. Each death shows in the live stats and the metrics
//! (`steer_worker_up`, `steer_worker_deaths_total`); with every worker gone
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
use support::net::TestNet;
use support::PORT;
use xdp_io::Proto;

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
