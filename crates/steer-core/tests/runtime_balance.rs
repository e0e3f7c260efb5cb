//! The load balancer on real worker threads: with one rx queue carrying all
//! the costly traffic and the other idle, the balancer moves unclaimed
//! flows to the idle worker, never reorders a flow, never moves a pinned or
//! recorded flow, and switches off (and on) at run time; without it nothing
//! moves. Workers count their busy time.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::flow_hash;
use common::rig::{Feed, Frames, PoolHandle};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::FramePool;
use steer_core::runtime::{RpsMode, Runtime, RuntimeConfig, Setup};

/// Flows 0..FLOWS; flow PINNED is pinned to CPU 0, flow RECORDED recorded
/// on CPU 0, both on rx queue 0 like every other flow.
const FLOWS: u32 = 24;
const PINNED: u32 = 3;
const RECORDED: u32 = 5;
/// CPU time each packet costs the handler.
const COST: Duration = Duration::from_micros(20);

/// What the handlers saw: per flow the last sequence number and a bit per
/// CPU that handled it; packets out of order.
#[derive(Default)]
struct Seen {
    last: Vec<AtomicU32>,
    cpus: Vec<AtomicU64>,
    reordered: AtomicU64,
    handled: AtomicU64,
}

struct App {
    frames: Arc<Frames>,
    seen: Arc<Seen>,
}

impl Setup<usize> for App {
    common::rig::frames_setup!();
    type Handler = Box<dyn FnMut(usize, &mut PoolHandle)>;
    fn handler(&self, cpu: CpuId) -> Self::Handler {
        let seen = self.seen.clone();
        Box::new(move |d, pool: &mut PoolHandle| {
            let (flow, seq) = common::read(&pool.0.bytes[d]);
            let f = flow as usize;
            // Sequence numbers start at 1: 0 is "none yet".
            let prev = seen.last[f].swap(seq, Ordering::Relaxed);
            if seq <= prev {
                seen.reordered.fetch_add(1, Ordering::Relaxed);
            }
            seen.cpus[f].fetch_or(1 << cpu, Ordering::Relaxed);
            let t = Instant::now();
            while t.elapsed() < COST {
                std::hint::spin_loop();
            }
            seen.handled.fetch_add(1, Ordering::Relaxed);
            pool.release(d);
        })
    }
}

/// `packets` packets round robin over the flows, all on rx queue 0.
fn frames(packets: usize) -> Arc<Frames> {
    let mut seq = vec![0u32; FLOWS as usize];
    let bytes = (0..packets)
        .map(|i| {
            let flow = i as u32 % FLOWS;
            seq[flow as usize] += 1;
            common::frame(flow, seq[flow as usize])
        })
        .collect();
    Frames::shared(bytes)
}

struct Run {
    rt: Runtime<usize, App>,
    feed: Feed,
    seen: Arc<Seen>,
    frames: Arc<Frames>,
}

fn start(balance: bool, packets: usize) -> Run {
    let frames = frames(packets);
    let seen = Arc::new(Seen {
        last: (0..FLOWS).map(|_| AtomicU32::new(0)).collect(),
        cpus: (0..FLOWS).map(|_| AtomicU64::new(0)).collect(),
        ..Seen::default()
    });
    let app = Arc::new(App {
        frames: frames.clone(),
        seen: seen.clone(),
    });
    let cfg = RuntimeConfig {
        cpus: CpuSet::first(2),
        rps: RpsMode::Local,
        ring_capacity: 8192,
        sleep_timeout: Duration::from_millis(2),
        balance,
        ..Default::default()
    };
    let layout = Arc::new(CpuLayout::uniform(2, 2).unwrap());
    let shared = cfg.shared(layout.clone()).unwrap();
    shared.pins.pin_flow(flow_hash(PINNED), 0);
    shared
        .desired
        .record(flow_hash(RECORDED), 0, &CpuSet::first(2), &layout)
        .unwrap();
    let feeds = [Feed::default(), Feed::default()];
    let rt = Runtime::start(cfg, shared, app, common::rig::sources(&feeds)).unwrap();
    Run {
        rt,
        feed: feeds[0].clone(),
        seen,
        frames,
    }
}

impl Run {
    /// Feeds packets `from..to` to rx queue 0 at about `per_ms` a
    /// millisecond, then waits until they are handled or dropped (a ring
    /// that fills drops with a counter, e.g. when the machine starves a
    /// worker).
    fn feed(&self, from: usize, to: usize, per_ms: usize) {
        let mut next = from;
        while next < to {
            let end = (next + per_ms).min(to);
            self.feed.0.lock().unwrap().extend(next..end);
            next = end;
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let done = || {
            let dropped = self.rt.stats().total.dropped;
            self.seen.handled.load(Ordering::Relaxed) + dropped >= to as u64
        };
        while !done() {
            assert!(
                Instant::now() < deadline,
                "packets not handled in time: handled {}, {:?}, {:?}",
                self.seen.handled.load(Ordering::Relaxed),
                self.rt.stats().total,
                self.rt.worker_states()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn on_cpu1(&self, flow: u32) -> bool {
        self.seen.cpus[flow as usize].load(Ordering::Relaxed) & 0b10 != 0
    }
}

#[test]
fn unclaimed_flows_leave_the_busy_worker_in_order_and_claims_stay() {
    let packets = 12_000;
    let run = start(true, packets);
    // CPU 0 is asked for 60 packets x 20 us = 1.2 ms of work per ms.
    run.feed(0, packets, 60);
    let stats = run.rt.stats();
    let balance = run.rt.shared().balance.stats();
    let moved = (0..FLOWS).filter(|&f| run.on_cpu1(f)).count();
    assert!(balance.moves() > 0, "{balance:?}");
    assert!(moved > 0, "no flow reached CPU 1");
    assert!(stats.per_cpu[1].1.steered_in > 0);
    assert_eq!(run.seen.reordered.load(Ordering::Relaxed), 0);
    assert!(!run.on_cpu1(PINNED), "a pinned flow moved");
    assert!(!run.on_cpu1(RECORDED), "a recorded flow moved");
    // Busy time was counted, most of it on CPU 0 until flows moved.
    assert!(stats.per_cpu[0].1.busy_ns > 0 && stats.per_cpu[1].1.busy_ns > 0);
    let frames = run.frames.clone();
    run.rt.stop();
    assert_eq!(frames.released.load(Ordering::Relaxed), packets);
}

#[test]
fn without_the_balancer_nothing_moves_and_it_switches_at_run_time() {
    let packets = 12_000;
    let run = start(false, packets);
    run.feed(0, packets / 3, 60);
    assert_eq!(run.rt.shared().balance.stats().moves(), 0);
    assert!(
        (0..FLOWS).all(|f| !run.on_cpu1(f)),
        "a flow moved with the balancer off"
    );
    assert_eq!(run.rt.stats().per_cpu[1].1.steered_in, 0);

    // On at run time: flows start moving.
    run.rt.shared().balance.set_on(true);
    run.feed(packets / 3, 2 * packets / 3, 60);
    let on = run.rt.shared().balance.stats();
    assert!(on.moves() > 0, "{on:?}");

    // Off again: every assignment is dropped; flows go back to RPS, in order.
    run.rt.shared().balance.set_on(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while run.rt.shared().balance.stats().released <= on.released {
        assert!(Instant::now() < deadline, "assignments not dropped");
        std::thread::sleep(Duration::from_millis(2));
    }
    let tables = run.rt.shared().balance.tables();
    assert!(tables
        .iter()
        .all(|t| (0..t.len()).all(|b| t.assigned(b).is_none())));
    run.feed(2 * packets / 3, packets, 60);
    assert_eq!(run.rt.shared().balance.stats().moves(), on.moves());
    assert_eq!(run.seen.reordered.load(Ordering::Relaxed), 0);
    run.rt.stop();
}
