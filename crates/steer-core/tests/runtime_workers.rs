//! Real worker threads: per-flow order and exact frame accounting while
//! consumers migrate concurrently; a worker whose handler panics restarts
//! in place, losing only the packet it panicked on and keeping every flow
//! in order; past its restart limit it is routed around and loses no other
//! frame; idle workers sleep and are woken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::flow_hash;
use common::rig::{Feed, Frames, PoolHandle};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::FramePool;
use steer_core::policy::Policy;
use steer_core::runtime::{
    AdaptiveSpin, Coalesce, Defer, RestartLimit, Runtime, RuntimeConfig, RuntimeError, RxSource,
    Setup, WorkerState,
};
use steer_core::stats::LocalStats;
use steer_core::wake::{Sleeper, ThreadSleeper};

/// A sleeper the test's feed can wake too (as an AF_XDP worker's event loop
/// wakes on socket readiness).
#[derive(Default)]
struct CondSleeper {
    woken: Mutex<bool>,
    cv: std::sync::Condvar,
}
struct SharedSleeper(Arc<CondSleeper>);
impl Sleeper for SharedSleeper {
    fn sleep(&self, timeout: Duration) {
        let guard = self.0.woken.lock().unwrap();
        let (mut guard, _) = self
            .0
            .cv
            .wait_timeout_while(guard, timeout, |w| !*w)
            .unwrap();
        *guard = false;
    }
    fn wake(&self) {
        *self.0.woken.lock().unwrap() = true;
        self.0.cv.notify_all();
    }
}

type Log = Arc<Mutex<HashMap<u32, Vec<u32>>>>;

struct App {
    frames: Arc<Frames>,
    log: Log,
    /// Flow id whose packets make the handler on `panic_cpu` panic.
    poison: Option<(u32, CpuId)>,
    /// CPU 0's sleeper, woken by the test when it feeds queue 0.
    cpu0_sleeper: Option<Arc<CondSleeper>>,
    /// Every worker's sleeper counts its idle turns here.
    idle_turns: Option<Arc<AtomicUsize>>,
    /// (flow, seq) of the packets any handler panics on (each once: a
    /// packet is not delivered again).
    marked: Vec<(u32, u32)>,
}

impl App {
    /// An app over `frames` that logs into `log`, with no poison, marked
    /// packets, special sleeper or idle counting.
    fn plain(frames: Arc<Frames>, log: Log) -> Self {
        Self {
            frames,
            log,
            poison: None,
            cpu0_sleeper: None,
            idle_turns: None,
            marked: Vec::new(),
        }
    }
}

/// Thread parking that counts the worker's idle turns.
struct CountingSleeper(ThreadSleeper, Arc<AtomicUsize>);
impl Sleeper for CountingSleeper {
    fn sleep(&self, timeout: Duration) {
        self.0.sleep(timeout);
    }
    fn wake(&self) {
        self.0.wake();
    }
    fn idle(&self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

impl Setup<usize> for App {
    common::rig::frames_setup!();
    type Handler = Box<dyn FnMut(usize, &mut PoolHandle)>;
    fn sleeper(&self, cpu: CpuId) -> Box<dyn Sleeper> {
        if let Some(turns) = &self.idle_turns {
            return Box::new(CountingSleeper(ThreadSleeper::current(), turns.clone()));
        }
        match (&self.cpu0_sleeper, cpu) {
            (Some(s), 0) => Box::new(SharedSleeper(s.clone())),
            _ => Box::new(ThreadSleeper::current()),
        }
    }
    fn handler(&self, cpu: CpuId) -> Self::Handler {
        let log = self.log.clone();
        let poison = self.poison;
        let marked = self.marked.clone();
        Box::new(move |d, pool: &mut PoolHandle| {
            let f = pool.0.bytes[d];
            let (flow, seq) = common::read(&f);
            if poison == Some((flow, cpu)) {
                panic!("poisoned packet on CPU {cpu}");
            }
            if marked.contains(&(flow, seq)) {
                panic!("marked packet {flow}/{seq} on CPU {cpu}");
            }
            log.lock().unwrap().entry(flow).or_default().push(seq);
            pool.release(d);
        })
    }
}

/// `packets` packets over `flows` flows, flow f arriving on queue f % 2.
fn frames(flows: u32, packets: usize) -> (Arc<Frames>, [Vec<usize>; 2]) {
    let mut bytes = Vec::new();
    let mut queues = [Vec::new(), Vec::new()];
    let mut seq = vec![0u32; flows as usize];
    for i in 0..packets {
        let flow = (i as u32 * 7919) % flows;
        let b = common::frame(flow, seq[flow as usize]);
        seq[flow as usize] += 1;
        bytes.push(b);
        queues[(flow % 2) as usize].push(i);
    }
    (Frames::shared(bytes), queues)
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn config(ring: usize) -> RuntimeConfig {
    RuntimeConfig {
        cpus: CpuSet::first(2),
        ring_capacity: ring,
        sleep_timeout: Duration::from_millis(2),
        ..Default::default()
    }
}

#[test]
fn order_and_accounting_under_concurrent_migration() {
    for (ring, policy) in [
        (8, Policy::Always),
        (64, Policy::LlcAffinity),
        (1024, Policy::Always),
    ] {
        let (frames, queues) = frames(32, 20_000);
        let log: Log = Default::default();
        let app = Arc::new(App::plain(frames.clone(), log.clone()));
        let feeds = [Feed::default(), Feed::default()];
        let layout = Arc::new(CpuLayout::uniform(2, 1).unwrap()); // two LLCs: every move crosses
        let rt = Runtime::start_with_layout(
            RuntimeConfig {
                policy,
                ..config(ring)
            },
            layout.clone(),
            app,
            common::rig::sources(&feeds),
        )
        .unwrap();
        let desired = rt.shared().desired.clone();
        // Consumers hop between CPUs while traffic flows.
        let migrator = std::thread::spawn(move || {
            let all = CpuSet::first(2);
            for i in 0..5_000u32 {
                desired
                    .record(flow_hash(i % 32), (i as usize / 7) % 2, &all, &layout)
                    .unwrap();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        for chunk in 0..20 {
            for (q, feed) in queues.iter().zip(&feeds) {
                let part = q.len() / 20;
                feed.0
                    .lock()
                    .unwrap()
                    .extend(&q[chunk * part..(chunk + 1) * part]);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        migrator.join().unwrap();
        let sent = frames.bytes.len();
        wait_for("all frames back", Duration::from_secs(20), || {
            frames.released.load(Ordering::Relaxed) == sent
        });
        let stats = rt.stats().total;
        let states = rt.stop();
        assert!(
            states.iter().all(|(_, s)| *s == WorkerState::Stopped),
            "{states:?}"
        );
        for (flow, seqs) in log.lock().unwrap().iter() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "ring {ring}: flow {flow} reordered"
            );
        }
        let handled: usize = log.lock().unwrap().values().map(Vec::len).sum();
        assert_eq!(stats.processed as usize, handled);
        assert_eq!(
            sent as u64,
            stats.processed + stats.dropped + stats.flow_limit_drops + stats.malformed
        );
        assert!(stats.steered_out > 0 && stats.steered_in > 0, "{stats:?}");
    }
}

/// What a [`run_panicking`] run came to.
struct Outcome {
    reports: Vec<steer_core::runtime::WorkerReport>,
    stats: steer_core::stats::LocalStats,
    sent: usize,
    released: usize,
    log: HashMap<u32, Vec<u32>>,
    layout: Arc<CpuLayout>,
}

/// Runs 4,000 packets over 16 flows (flow 3 recorded on CPU 1, on two rx
/// queues) with handlers that panic on every packet of `poison`'s flow on
/// its CPU and on the `marked` packets, under `limit`, until every frame
/// but `lost` is back and the queues are empty.
fn run_panicking(
    poison: Option<(u32, CpuId)>,
    marked: Vec<(u32, u32)>,
    limit: RestartLimit,
    lost: usize,
) -> Outcome {
    let (frames, queues) = frames(16, 4_000);
    let log: Log = Default::default();
    let app = Arc::new(App {
        frames: frames.clone(),
        log: log.clone(),
        poison,
        cpu0_sleeper: None,
        idle_turns: None,
        marked,
    });
    let feeds = [Feed::default(), Feed::default()];
    let layout = Arc::new(CpuLayout::uniform(2, 1).unwrap());
    let rt = Runtime::start_with_layout(
        RuntimeConfig {
            worker_restarts: limit,
            ..config(256)
        },
        layout.clone(),
        app,
        common::rig::sources(&feeds),
    )
    .unwrap();
    rt.shared()
        .desired
        .record(flow_hash(3), 1, &CpuSet::first(2), &layout)
        .unwrap();
    for (q, feed) in queues.iter().zip(&feeds) {
        feed.0.lock().unwrap().extend(q);
    }
    let sent = frames.bytes.len();
    wait_for(
        "every frame handled or lost",
        Duration::from_secs(20),
        || {
            frames.released.load(Ordering::Relaxed) + lost >= sent
                && feeds.iter().all(|f| f.0.lock().unwrap().is_empty())
        },
    );
    let reports = rt.worker_states_handle().reports();
    let stats = rt.stats().total;
    rt.stop();
    let released = frames.released.load(Ordering::Relaxed);
    let log = log.lock().unwrap().clone();
    Outcome {
        reports,
        stats,
        sent,
        released,
        log,
        layout,
    }
}

#[test]
fn a_worker_restarts_in_place_losing_only_the_packets_it_panicked_on() {
    // Three packets of flow 3 (on CPU 1) and one of flow 4 make a handler
    // panic: four restarts, within the default limit of five a minute.
    let marked = vec![(3, 10), (3, 11), (3, 100), (4, 7)];
    let Outcome {
        reports,
        stats,
        sent,
        released,
        log,
        ..
    } = run_panicking(None, marked.clone(), RestartLimit::default(), marked.len());
    assert!(
        reports.iter().all(|r| r.state == WorkerState::Running),
        "{reports:?}"
    );
    let restarts: u32 = reports.iter().map(|r| r.restarts).sum();
    assert_eq!(restarts, 4, "{reports:?}");
    let cpu1 = reports.iter().find(|r| r.cpu == 1).unwrap();
    assert!(cpu1.restarts >= 3, "{reports:?}");
    assert!(
        cpu1.last_panic
            .as_deref()
            .is_some_and(|m| m.contains("marked")),
        "{reports:?}"
    );
    // Exactly the marked packets are lost; everything else was handled, in
    // order, by the restarted workers (no flow moved), or dropped on a full
    // ring while a worker restarted (counted).
    assert_eq!(released, sent - marked.len());
    let handled: usize = log.values().map(Vec::len).sum();
    // The marked packets were handed over (processed), then lost.
    assert_eq!(
        handled + marked.len(),
        stats.processed as usize,
        "{stats:?}"
    );
    assert_eq!(
        handled as u64 + stats.dropped,
        (sent - marked.len()) as u64,
        "{stats:?}"
    );
    for (flow, seqs) in &log {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "flow {flow} reordered"
        );
        for &(f, seq) in &marked {
            if f == *flow {
                assert!(!seqs.contains(&seq));
            }
        }
    }
    assert_eq!(stats.worker_gone_drops, 0, "nothing given up: {stats:?}");
    assert_eq!(stats.rx as usize, sent, "{stats:?}");
    assert_eq!(
        stats.rx,
        stats.processed + stats.dropped + stats.worker_gone_drops,
        "{stats:?}"
    );
}

#[test]
fn past_its_restart_limit_a_worker_dies_and_is_routed_around() {
    // Flow 3 runs on CPU 1; its third marked packet is past a limit of two.
    let marked = vec![(3, 10), (3, 20), (3, 30)];
    let limit = RestartLimit {
        burst: 2,
        interval: Duration::from_secs(60),
    };
    let out = run_panicking(None, marked.clone(), limit, marked.len());
    let (reports, stats, log) = (&out.reports, &out.stats, &out.log);
    let cpu1 = reports.iter().find(|r| r.cpu == 1).unwrap();
    assert_eq!(cpu1.restarts, 2, "{reports:?}");
    assert!(
        matches!(&cpu1.state, WorkerState::Panicked(m) if m.contains("3/30")),
        "{reports:?}"
    );
    let cpu0 = reports.iter().find(|r| r.cpu == 0).unwrap();
    assert_eq!(cpu0.state, WorkerState::Running);
    // The survivor took flow 3 over; only the marked packets are lost.
    assert!(log[&3].iter().any(|&s| s > 30), "{:?}", log[&3]);
    assert_eq!(out.released, out.sent - marked.len());
    for seqs in log.values() {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }
    assert_eq!(
        stats.rx,
        stats.processed + stats.dropped + stats.worker_gone_drops,
        "{stats:?}"
    );
}

#[test]
fn a_panicking_worker_is_routed_around_and_loses_no_frame() {
    // Flow 3's packets kill the worker on CPU 1 (if they ever get there),
    // which is never restarted.
    let out = run_panicking(Some((3, 1)), Vec::new(), RestartLimit::NEVER, 1);
    let states = &out.reports;
    assert!(
        matches!(&states[1].state, WorkerState::Panicked(m) if m.contains("poisoned")),
        "{states:?}"
    );
    assert_eq!(states[0].state, WorkerState::Running);
    assert!(
        !out.layout.is_online(1),
        "the dead worker's CPU is marked offline"
    );
    // The survivor adopted CPU 1's rx queue and handled flow 3 after the death.
    let after = out.log.get(&3).map_or(0, Vec::len);
    assert!(after > 0, "flow 3 was re-steered to the survivor");
    // Every frame received was handled or dropped with its reason (the rest
    // of the batch the panic interrupted counts as dropped with the worker;
    // this source queues it again, so it is received and handled anew).
    let stats = out.stats;
    assert!(stats.rx as usize >= out.sent, "{stats:?}");
    assert_eq!(
        stats.rx,
        stats.processed + stats.dropped + stats.worker_gone_drops,
        "{stats:?}"
    );
    // Exactly the one packet inside the panicking handler is lost with it.
    assert_eq!(out.released, out.sent - 1);
    for seqs in out.log.values() {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn idle_workers_sleep_and_wake_for_new_packets() {
    let (frames, queues) = frames(4, 100);
    let cpu0 = Arc::new(CondSleeper::default());
    let app = Arc::new(App {
        cpu0_sleeper: Some(cpu0.clone()),
        ..App::plain(frames.clone(), Default::default())
    });
    let feeds = [Feed::default(), Feed::default()];
    let rt = Runtime::start_with_layout(
        RuntimeConfig {
            sleep_timeout: Duration::from_secs(30),
            idle_spins: 4,
            ..config(64)
        },
        Arc::new(CpuLayout::uniform(2, 1).unwrap()),
        app,
        common::rig::sources(&feeds),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50)); // both asleep now
                                                   // Flows of queue 0 desired on CPU 1: the dispatcher on CPU 0 must ring CPU 1.
    for flow in (0..4).step_by(2) {
        rt.shared()
            .desired
            .record(flow_hash(flow), 1, &CpuSet::first(2), &rt.shared().layout)
            .unwrap();
    }
    feeds[0].0.lock().unwrap().extend(&queues[0]);
    // Both workers sleep with a 30 s timeout. The feed wakes CPU 0 (its
    // "socket" became readable); only CPU 0's dispatcher ringing CPU 1's
    // doorbell can wake CPU 1, which must handle every packet.
    SharedSleeper(cpu0).wake();
    let start = Instant::now();
    wait_for("packets handled", Duration::from_secs(10), || {
        frames.released.load(Ordering::Relaxed) == queues[0].len()
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    let per_cpu = rt.stats().per_cpu;
    assert_eq!(
        per_cpu[1].1.processed as usize,
        queues[0].len(),
        "CPU 1 handled them: {per_cpu:?}"
    );
    rt.stop();
}

/// A worker that polls without sleeping (busy-poll), or spins before it
/// sleeps, gives its sleeper an idle turn on each round without work (an
/// executor's timers and I/O run there); one that sleeps at once does not.
#[test]
fn rounds_without_work_that_do_not_sleep_give_the_sleeper_idle_turns() {
    for (busy_poll, idle_spins, expect_many) in
        [(true, 0, true), (false, 1000, true), (false, 0, false)]
    {
        let (frames, _) = frames(2, 10);
        let turns = Arc::new(AtomicUsize::new(0));
        let app = Arc::new(App {
            frames,
            log: Default::default(),
            poison: None,
            cpu0_sleeper: None,
            idle_turns: Some(turns.clone()),
            marked: Vec::new(),
        });
        let rt = Runtime::start_with_layout(
            RuntimeConfig {
                busy_poll,
                idle_spins,
                sleep_timeout: Duration::from_millis(5),
                ..config(64)
            },
            Arc::new(CpuLayout::uniform(2, 1).unwrap()),
            app,
            vec![Box::new(Feed::default()) as Box<dyn RxSource<usize>>],
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        rt.stop();
        let n = turns.load(Ordering::Relaxed);
        if expect_many {
            // Busy-polling: every round; spinning: 1000 rounds per sleep.
            assert!(
                n >= 1000,
                "busy_poll {busy_poll} spins {idle_spins}: {n} idle turns"
            );
        } else {
            // Sleeping after the first empty round: no round spins.
            assert_eq!(n, 0, "a worker that sleeps at once got {n} idle turns");
        }
    }
}

/// The shared state is built before the start: pins and consumer records
/// made then steer the very first packets, and the runtime runs on that
/// state itself (not a copy).
#[test]
fn shared_state_built_before_start_steers_from_the_first_packet() {
    let layout = Arc::new(CpuLayout::uniform(2, 1).unwrap());
    let cfg = config(256);
    let shared = cfg.shared(layout.clone()).unwrap();
    // Plain RPS (hash scaled over CPUs 0 and 1) would put `a` on CPU 0 and
    // `b` on CPU 1; the pin and the record made before the start send them
    // the other way.
    let rps = |f: u32| ((u64::from(flow_hash(f)) * 2) >> 32) as usize;
    let a = (0..).find(|&f| rps(f) == 0).unwrap();
    let b = (0..).find(|&f| rps(f) == 1).unwrap();
    shared.pins.pin_flow(flow_hash(a), 1);
    shared
        .desired
        .record(flow_hash(b), 0, &CpuSet::first(2), &layout)
        .unwrap();

    // Three packets of `a` for each of `b`, so swapped CPUs show.
    let packets = 200u32;
    let flow_of = |i: u32| if i.is_multiple_of(4) { b } else { a };
    let bytes = (0..packets).map(|i| common::frame(flow_of(i), i)).collect();
    let frames = Frames::shared(bytes);
    let feed = Feed::default();
    feed.0.lock().unwrap().extend(0..packets as usize);
    let app = Arc::new(App::plain(frames.clone(), Default::default()));
    let stats = shared.stats.clone();
    let pins = shared.pins.clone();
    // One rx queue, dispatched on CPU 0.
    let rt = Runtime::start(cfg, shared, app, vec![Box::new(feed)]).unwrap();
    assert!(Arc::ptr_eq(&rt.shared().pins, &pins));
    assert!(Arc::ptr_eq(&rt.shared().stats, &stats));
    wait_for("packets handled", Duration::from_secs(10), || {
        frames.released.load(Ordering::Relaxed) == packets as usize
    });
    rt.stop();
    let snap = stats.snapshot();
    let of_a = (0..packets).filter(|&i| flow_of(i) == a).count() as u64;
    let of_b = u64::from(packets) - of_a;
    assert_eq!((of_a, of_b), (150, 50));
    assert_eq!(snap.per_cpu[1].1.processed, of_a, "a on CPU 1: {snap:?}");
    assert_eq!(snap.per_cpu[0].1.processed, of_b, "b on CPU 0: {snap:?}");
    assert_eq!(
        snap.per_cpu[0].1.steered_out, of_a,
        "a left CPU 0: {snap:?}"
    );
}

/// A `Shared` assembled by hand with parts sized for other CPUs than its
/// layout is refused with a typed error, before any worker starts.
#[test]
fn shared_state_sized_for_other_cpus_is_refused() {
    let cfg = config(256);
    let shared = steer_core::dispatch::Shared {
        stats: Arc::new(steer_core::stats::Stats::new(1)),
        ..cfg
            .shared(Arc::new(CpuLayout::uniform(2, 1).unwrap()))
            .unwrap()
    };
    let (frames, _) = frames(2, 2);
    let app = Arc::new(App {
        frames,
        log: Default::default(),
        poison: None,
        cpu0_sleeper: None,
        idle_turns: None,
        marked: Vec::new(),
    });
    let err = Runtime::start(cfg, shared, app, vec![Box::new(Feed::default())]).unwrap_err();
    assert_eq!(
        err,
        RuntimeError::SharedMismatch {
            layout: 2,
            desired: 2,
            stats: 1
        }
    );
    assert!(err.to_string().contains("RuntimeConfig::shared"), "{err}");
}

/// A runtime of `cfg` on `layout` over `frames` whose CPU 0 worker parks
/// on a [`CondSleeper`] the test wakes, fed by one rx queue: the runtime,
/// the queue and the sleeper.
fn one_worker_on_a_cond_sleeper(
    frames: &Arc<Frames>,
    cfg: RuntimeConfig,
    layout: CpuLayout,
) -> (Runtime<usize, App>, Feed, Arc<CondSleeper>) {
    let sleeper = Arc::new(CondSleeper::default());
    let app = Arc::new(App {
        cpu0_sleeper: Some(sleeper.clone()),
        ..App::plain(frames.clone(), Default::default())
    });
    let feed = Feed::default();
    let rt = Runtime::start_with_layout(
        cfg,
        Arc::new(layout),
        app,
        common::rig::sources(std::slice::from_ref(&feed)),
    )
    .unwrap();
    (rt, feed, sleeper)
}

/// Interrupt deferral: a worker that just did work naps on a timer and
/// polls again, so packets that arrive meanwhile are handled although
/// nobody wakes it; after `empty_naps` empty naps it sleeps until woken.
#[test]
fn a_deferring_worker_polls_after_work_without_being_woken_then_sleeps() {
    let (frames, queues) = frames(2, 40);
    let (rt, feed, cpu0) = one_worker_on_a_cond_sleeper(
        &frames,
        RuntimeConfig {
            cpus: CpuSet::first(1),
            sleep_timeout: Duration::from_secs(30),
            idle_spins: 4,
            // A window of about a second: the test's second batch comes
            // well inside it, however slow the machine.
            defer: Some(Defer {
                nap: Duration::from_millis(5),
                empty_naps: 200,
            }),
            ..config(64)
        },
        CpuLayout::uniform(1, 1).unwrap(),
    );
    std::thread::sleep(Duration::from_millis(50)); // asleep now
    let (first, second) = queues[0].split_at(20);
    feed.0.lock().unwrap().extend(first);
    SharedSleeper(cpu0.clone()).wake(); // the "socket" became readable
    wait_for("the first batch", Duration::from_secs(10), || {
        frames.released.load(Ordering::Relaxed) == first.len()
    });
    // No wake: only the worker's own naps find these.
    feed.0.lock().unwrap().extend(second);
    wait_for("the second batch, unwoken", Duration::from_secs(10), || {
        frames.released.load(Ordering::Relaxed) == queues[0].len()
    });
    // Empty naps run out: it sleeps until woken again.
    wait_for("a sleep after the naps", Duration::from_secs(10), || {
        rt.stats().per_cpu[0].1.sleeps >= 2
    });
    let stats = rt.stats().per_cpu[0].1;
    assert!(stats.naps >= 1, "{stats:?}");
    rt.stop();
}

/// Packets every 20 us on one rx queue, each with a wake-up, for 300 ms;
/// returns how often the worker slept and how many packets it handled.
fn sleeps_under_a_steady_trickle(adaptive: Option<AdaptiveSpin>) -> (u64, u64) {
    let (stats, _) = under_a_trickle(
        RuntimeConfig {
            cpus: CpuSet::first(1),
            adaptive,
            ..config(1024)
        },
        Duration::from_micros(20),
    );
    (stats.sleeps, stats.processed)
}

/// Packets `gap` apart on one rx queue, each with a wake-up, for 300 ms
/// (at most 20,000): the worker's counters and how many were sent.
fn under_a_trickle(cfg: RuntimeConfig, gap: Duration) -> (LocalStats, usize) {
    let packets = 20_000usize;
    let frames = Frames::shared((0..packets as u32).map(|i| common::frame(1, i)).collect());
    let (rt, feed, sleeper) =
        one_worker_on_a_cond_sleeper(&frames, cfg, CpuLayout::uniform(2, 1).unwrap());
    let start = Instant::now();
    let mut next = 0;
    while start.elapsed() < Duration::from_millis(300) && next < packets {
        feed.0.lock().unwrap().push_back(next);
        next += 1;
        SharedSleeper(sleeper.clone()).wake();
        let sent = Instant::now();
        while sent.elapsed() < gap {
            std::hint::spin_loop();
        }
    }
    wait_for("the trickle handled", Duration::from_secs(10), || {
        frames.released.load(Ordering::Relaxed) == next
    });
    let total = rt.stats().total;
    rt.stop();
    (total, next)
}

/// Coalescing that follows the traffic: packets 2 ms apart (further than
/// half the longest nap) get no naps, each wakes the worker; packets 20 us
/// apart are picked up by naps, with far fewer sleeps than packets. Loose
/// bounds: the machine may preempt either side now and then.
#[test]
fn coalescing_naps_only_while_packets_come_close_together() {
    let cfg = RuntimeConfig {
        cpus: CpuSet::first(1),
        idle_spins: 4,
        coalesce: Some(Coalesce {
            max_nap: Duration::from_millis(1),
            ..Coalesce::default()
        }),
        ..config(1024)
    };
    let (sparse, sent) = under_a_trickle(cfg.clone(), Duration::from_millis(2));
    assert!(sent > 50, "{sent}");
    assert!(
        sparse.naps * 10 <= sent as u64,
        "sparse traffic napped: {sparse:?} for {sent} packets"
    );
    assert!(sparse.sleeps * 10 >= sent as u64 * 8, "{sparse:?}");
    let (dense, sent) = under_a_trickle(cfg, Duration::from_micros(20));
    assert!(sent > 1_000, "{sent}");
    assert!(dense.naps > 0, "{dense:?}");
    assert!(
        dense.sleeps * 4 < sent as u64,
        "dense traffic slept as often as sparse: {dense:?} for {sent} packets"
    );
}

/// With adaptive polling a worker fed a packet every 20 us learns to poll
/// across the gaps instead of sleeping at each (the haltpoll rule); with
/// the fixed spin it sleeps between most packets. Loose bounds: the
/// machine may preempt either side now and then.
#[test]
fn adaptive_polling_sleeps_far_less_under_a_steady_trickle() {
    let (fixed_sleeps, fixed_handled) = sleeps_under_a_steady_trickle(None);
    let (adaptive_sleeps, adaptive_handled) = sleeps_under_a_steady_trickle(Some(AdaptiveSpin {
        // Polling across 20 us gaps is most of the time: with no budget
        // the rule alone decides (the budget has unit tests).
        budget_percent: 100,
        ..AdaptiveSpin::default()
    }));
    assert!(fixed_handled > 1_000 && adaptive_handled > 1_000);
    let fixed_rate = fixed_sleeps as f64 / fixed_handled as f64;
    let adaptive_rate = adaptive_sleeps as f64 / adaptive_handled as f64;
    eprintln!(
        "sleeps per packet: fixed spin {fixed_rate:.3} ({fixed_sleeps}/{fixed_handled}), \
         adaptive {adaptive_rate:.3} ({adaptive_sleeps}/{adaptive_handled})"
    );
    assert!(
        adaptive_rate * 2.5 < fixed_rate,
        "adaptive {adaptive_rate:.3} sleeps per packet against {fixed_rate:.3}"
    );
}
