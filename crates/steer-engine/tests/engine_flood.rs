//! A flood beyond capacity: for 30 s (`STEER_FLOOD_SECS` to change it)
//! several flows blast the echo engine, whose rings and UMEM are made small
//! and whose handler is made slow (20 us per packet), so both the steer
//! rings and the AF_XDP rx rings overflow. It must not crash, must count the
//! drops, keep its memory flat, answer normally once the flood is over, and
//! account for every frame exactly at stop. In its own test binary so it
//! does not compete for the 2 CPUs with the ordering tests.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{PacketContext, Verdict};
use steer_testbed::TestNet;
use support::{assert_accounted, drive_flows, echo_builder, rss_kib, PORT};

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn a_30s_flood_beyond_capacity_drops_with_counters_and_loses_no_frame() {
    let secs: u64 = std::env::var("STEER_FLOOD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let net = TestNet::new();
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .ring_capacity(64)
        .frames(1024, 256)
        .handler(|_cpu| {
            Box::new(|p: &mut [u8], _: &PacketContext| {
                spin(Duration::from_micros(20));
                match echo_in_place(p, EchoMode::Plain) {
                    Ok(len) => Verdict::Transmit(len),
                    Err(_) => Verdict::Drop,
                }
            })
        })
        .start()
        .unwrap();

    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let mut rss = Vec::new();
    std::thread::scope(|s| {
        for flow in 0..4u16 {
            let (stop, sent, net) = (&stop, &sent, &net);
            s.spawn(move || {
                net.in_ns(|| {
                    let u = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
                    u.set_nonblocking(true).unwrap();
                    let to = SocketAddr::new(net.host_v4.into(), PORT);
                    let msg = [flow as u8; 64];
                    let mut buf = [0u8; 128];
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if u.send_to(&msg, to).is_ok() {
                            n += 1;
                        }
                        // Drain replies so the client socket never blocks us.
                        while u.recv_from(&mut buf).is_ok() {}
                    }
                    sent.fetch_add(n, Ordering::Relaxed);
                })
            });
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(500));
            if start.elapsed() >= Duration::from_secs(secs.min(5)) {
                rss.push(rss_kib());
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let during = engine.stats();
    // The backlog (full rings, 20 us per packet) drains first; a request
    // arriving before that finds a full ring and is dropped, as it should.
    let mut last = during.total.core.rx;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = engine.stats().total.core.rx;
        if now == last {
            break;
        }
        last = now;
    }

    // After the flood: answers as before.
    let got = drive_flows(&net, 4, 50, 10);
    assert!(
        got.iter().all(|g| g.len() == 50),
        "replies per flow after the flood: {got:?}\n{}",
        engine.stats().table(Some(&during))
    );
    let report = engine.stop().unwrap();
    let t = &report.stats.total;
    let kernel_drops = report.kernel.rx_dropped + report.kernel.rx_ring_full;
    let offered = sent.load(Ordering::Relaxed);
    eprintln!(
        "flood {secs}s: offered {offered}, received {}, answered {}, steer drops {}, AF_XDP ring drops {kernel_drops}, rss {:?} KiB",
        t.core.rx,
        t.engine.tx,
        t.drops(),
        (rss.first(), rss.last())
    );
    eprintln!("{}", during.table(None));
    // Beyond capacity: packets were dropped, and each drop has a counter
    // (steer's rings, or the AF_XDP rx ring the kernel could not fill).
    assert!(t.drops() + kernel_drops > 0, "{t:?} {:?}", report.kernel);
    assert!(
        t.core.rx < offered,
        "offered {offered}, all received: not a flood"
    );
    // Memory flat: no growth beyond 4 MiB from the 5 s mark to the end.
    let (first, max) = (rss[0], *rss.iter().max().unwrap());
    assert!(max - first < 4096, "RSS grew from {first} to {max} KiB");
    assert_accounted(&report);
}
