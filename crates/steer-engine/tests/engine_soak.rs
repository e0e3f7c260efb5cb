//! The ordering soak: the echo under load with flows moved at random
//! between 2 workers by their handler, malformed frames mixed in, rings so
//! small that bursts overflow them now and then, and one worker's handler
//! panicking midway (the worker restarts in place). Among the replies that come back none is out of
//! order; every drop is counted with its reason and the counts add up;
//! every UMEM frame is back at stop; memory stays flat (RSS sampled over
//! the run). `STEER_SOAK_SECS` sets the duration (default 5 s, what CI
//! runs; run it for 60 s by hand). In its own test binary so nothing else
//! competes for the 2 CPUs.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use steer_engine::engine::{Engine, PacketContext, PacketHandler, Verdict};
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::ordered::{self, Load, MovingEcho};
use support::{malformed_frames, rss_kib, send_raw, PORT};

/// The worker whose handler panics midway.
const DOOMED_CPU: usize = 1;

/// [`MovingEcho`] that panics on the first packet after `doom` is set, on
/// the worker of [`DOOMED_CPU`].
struct DoomedEcho {
    inner: MovingEcho,
    doom: Option<Arc<AtomicBool>>,
}

impl PacketHandler for DoomedEcho {
    fn handle(&mut self, packet: &mut [u8], ctx: &PacketContext) -> Verdict {
        if let Some(doom) = &self.doom {
            if doom.swap(false, Ordering::Relaxed) {
                panic!("soak: the handler on CPU {} panics midway", ctx.cpu);
            }
        }
        self.inner.handle(packet, ctx)
    }
}

#[test]
fn soak_moves_malformed_frames_full_rings_and_a_panic_keep_order_and_account_for_everything() {
    let secs: u64 = std::env::var("STEER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(2);
    let duration = Duration::from_secs(secs);
    // The panic prints its message only: a backtrace would load the test
    // binary's debug info (about 70 MiB, once) and hide the RSS trend.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let net = TestNet::new();
    let doom = Arc::new(AtomicBool::new(false));
    let handler_doom = Arc::clone(&doom);
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .policy(Policy::Always)
        .ring_capacity(16)
        .frames(1024, 128)
        .handler(move |cpu| {
            Box::new(DoomedEcho {
                inner: MovingEcho::new(cpu, 8, &[0, 1]),
                doom: (cpu == DOOMED_CPU).then(|| Arc::clone(&handler_doom)),
            })
        })
        .start()
        .expect("engine starts on the test veth");

    let bad = malformed_frames(&net);
    let mut malformed_sent = 0u64;
    let mut rss = Vec::new();
    let mut at_panic = None;
    let load = std::thread::scope(|s| {
        let load = s.spawn(|| {
            ordered::run(
                &net,
                &Load {
                    threads: 2,
                    flows_per_thread: 8,
                    window: 16,
                    burst: 48,
                    burst_every: Duration::from_millis(100),
                    duration,
                },
            )
        });
        let start = Instant::now();
        let mut next_sample = start;
        while start.elapsed() < duration {
            // Malformed frames, mixed in every 50 ms.
            send_raw(&net, &bad);
            malformed_sent += bad.len() as u64;
            if at_panic.is_none() && start.elapsed() >= duration / 2 {
                at_panic = Some(engine.stats());
                doom.store(true, Ordering::Relaxed);
            }
            // RSS twice a second once the first quarter has warmed up.
            if start.elapsed() >= duration / 4 && Instant::now() >= next_sample {
                rss.push(rss_kib());
                next_sample = Instant::now() + Duration::from_millis(500);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        load.join().unwrap()
    });
    let at_panic = at_panic.expect("the panic was triggered");
    let workers = engine.live_stats().workers;
    let program = engine.program_stats().unwrap();
    let report = engine.stop().unwrap();
    let t = &report.stats.total;
    let after_panic_tx = t.engine.tx - at_panic.total.engine.tx;
    let (rss_first, rss_max) = (rss[0], *rss.iter().max().unwrap());
    let k = &report.kernel;
    eprintln!(
        "soak {secs}s: clients {load:?}\n\
         engine: rx {} tx {} (after the panic {after_panic_tx}) consumed {}, moves {}, held back {}\n\
         drops by reason: ring full {}, worker gone {}, malformed {}, refused by the handler {}, \
         handler panicked {}, tx ring full {}, flow limit {}\n\
         malformed frames sent {malformed_sent}; program redirected {}, passed {}; \
         AF_XDP kernel drops: rx_dropped {}, rx_ring_full {}, fill ring empty {}\n\
         census {:?}\nRSS {rss_first} -> max {rss_max}, last {} KiB over {} samples\n{}",
        t.core.rx,
        t.engine.tx,
        t.engine.consumed,
        t.core.hook_calls,
        t.core.held_back,
        t.core.dropped,
        t.core.worker_gone_drops,
        t.core.malformed,
        t.engine.app_dropped,
        t.engine.app_panicked,
        t.engine.tx_dropped,
        t.core.flow_limit_drops,
        program.redirected,
        program.passed,
        k.rx_dropped,
        k.rx_ring_full,
        k.rx_fill_ring_empty,
        report.census,
        rss[rss.len() - 1],
        rss.len(),
        report.stats.table(None),
    );

    // Order: none among the answered.
    assert_eq!(
        (load.reordered, load.duplicated),
        (0, 0),
        "replies out of order: {load:?}"
    );
    assert!(load.answered >= 1_000 * secs, "too little load: {load:?}");
    assert!(t.core.hook_calls >= 50 * secs, "too few moves");
    // The panic: the worker restarted in place and both kept answering.
    let doomed = workers.iter().find(|w| w.cpu == DOOMED_CPU).unwrap();
    assert!(
        doomed.up
            && doomed.restarts == 1
            && doomed
                .panic
                .as_deref()
                .is_some_and(|m| m.contains("midway")),
        "{workers:?}"
    );
    assert!(
        report
            .workers
            .iter()
            .all(|(_, s)| *s == WorkerState::Stopped),
        "{:?}",
        report.workers
    );
    assert_eq!(t.engine.app_panicked, 1, "the panicking packet is counted");
    assert!(
        after_panic_tx >= 100 * secs,
        "the workers kept answering: {after_panic_tx} replies after the panic"
    );
    // Every drop counted by its reason, and the counts add up.
    assert!(t.core.dropped > 0, "bursts overflowed the tiny rings");
    assert!(t.core.malformed > 0, "malformed frames were counted");
    assert!(
        t.engine.app_dropped > 0,
        "frames the echo refuses were counted"
    );
    assert_eq!(
        t.core.rx,
        t.engine.tx + t.drops() + t.engine.consumed,
        "rx = tx + drops + consumed: {t:?}"
    );
    // What the program redirected the engine received, or the kernel
    // dropped at the AF_XDP socket (no fill frame, or the rx ring full).
    assert_eq!(
        program.redirected,
        t.core.rx + k.rx_dropped + k.rx_ring_full,
        "redirected = received + AF_XDP drops"
    );
    // Every UMEM frame back at stop.
    assert!(report.census_ok(), "frame census: {:?}", report.census);
    // Memory flat: no growth beyond 4 MiB after the first quarter.
    assert!(
        rss_max - rss_first < 4096,
        "RSS grew from {rss_first} to {rss_max} KiB"
    );
}
