//! Expiry under load: a worker whose rx queue never runs dry (every poll
//! returns a full batch of one hot flow) still expires the rx-table entries
//! of flows that went quiet, and removes their hook state, within a few
//! idle timeouts; the hot flow keeps its entry.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::ByFlowId;
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::FramePool;
use steer_core::hook::{FilterId, FlowMove, HookError, SteerHook};
use steer_core::runtime::{Runtime, RuntimeConfig, RxSource, Setup};

/// Flows that send one packet at the start, then nothing.
const STALE: u32 = 200;
/// The flow that never stops.
const HOT: u32 = 0;

/// Hook state handed out and removed, shared with the test.
#[derive(Default)]
struct HookCounts {
    steers: AtomicU64,
    removes: AtomicU64,
    /// Removes of the hot flow's state.
    hot_removes: AtomicU64,
}

struct CountingHook {
    counts: Arc<HookCounts>,
    hot_bucket: Option<usize>,
}

impl SteerHook for CountingHook {
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        self.counts.steers.fetch_add(1, Ordering::Relaxed);
        if mv.hash == common::flow_hash(HOT) {
            self.hot_bucket = Some(mv.bucket);
        }
        Ok(Some(FilterId(mv.bucket as u32)))
    }
    fn remove(&mut self, _rxq: u32, bucket: usize, _filter: FilterId) {
        self.counts.removes.fetch_add(1, Ordering::Relaxed);
        if Some(bucket) == self.hot_bucket {
            self.counts.hot_removes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Descriptor `d` is a packet of flow `d` (sequence 0).
struct Frames(Vec<[u8; 8]>);
struct Pool(Arc<Frames>);
impl FramePool<usize> for Pool {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.0 .0[*d]
    }
    fn release(&mut self, _d: usize) {}
}

/// The stale flows once, then the hot flow forever, a full batch a poll.
struct Endless {
    next_stale: u32,
    polls: Arc<AtomicUsize>,
}
impl RxSource<usize> for Endless {
    fn poll(&mut self, out: &mut [usize]) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        for slot in out.iter_mut() {
            *slot = if self.next_stale <= STALE {
                self.next_stale += 1;
                (self.next_stale - 1) as usize
            } else {
                HOT as usize
            };
        }
        out.len()
    }
    fn give_back(&mut self, _descs: &[usize]) {}
}

struct App {
    frames: Arc<Frames>,
    counts: Arc<HookCounts>,
}

impl Setup<usize> for App {
    type Classifier = ByFlowId;
    type Hook = CountingHook;
    type Pool = Pool;
    type Handler = Box<dyn FnMut(usize, &mut Pool)>;
    fn classifier(&self, _: u32) -> ByFlowId {
        ByFlowId
    }
    fn hook(&self, _: u32) -> CountingHook {
        CountingHook {
            counts: Arc::clone(&self.counts),
            hot_bucket: None,
        }
    }
    fn pool(&self, _: CpuId) -> Pool {
        Pool(Arc::clone(&self.frames))
    }
    fn handler(&self, _: CpuId) -> Self::Handler {
        Box::new(|_d, _p: &mut Pool| {})
    }
}

#[test]
fn idle_flows_expire_while_the_worker_never_idles() {
    let frames = Arc::new(Frames((0..=STALE).map(|f| common::frame(f, 0)).collect()));
    let counts = Arc::new(HookCounts::default());
    let polls = Arc::new(AtomicUsize::new(0));
    let cfg = RuntimeConfig {
        cpus: CpuSet::first(1),
        rx_table_entries: 4096,
        flow_idle_ms: 20,
        busy_poll: true,
        ..Default::default()
    };
    let rt = Runtime::start_with_layout(
        cfg,
        Arc::new(CpuLayout::uniform(1, 1).unwrap()),
        Arc::new(App {
            frames,
            counts: Arc::clone(&counts),
        }),
        vec![Box::new(Endless {
            next_stale: 1,
            polls: Arc::clone(&polls),
        })],
    )
    .unwrap();
    // Every flow placed once (the 4096-bucket table holds each alone).
    let deadline = Instant::now() + Duration::from_secs(5);
    while counts.steers.load(Ordering::Relaxed) < u64::from(STALE) + 1 {
        assert!(Instant::now() < deadline, "flows never placed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Under continuous load the stale flows go within a few timeouts plus
    // a sweep of the table.
    let deadline = Instant::now() + Duration::from_secs(5);
    while counts.removes.load(Ordering::Relaxed) < u64::from(STALE) {
        assert!(
            Instant::now() < deadline,
            "stale flows not expired under load: {} of {STALE} removed",
            counts.removes.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let polls_before = polls.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    let stats = rt.stats().total;
    rt.stop();
    // The worker was busy throughout: it kept polling a full queue.
    assert!(polls.load(Ordering::Relaxed) > polls_before);
    assert_eq!(counts.removes.load(Ordering::Relaxed), u64::from(STALE));
    assert_eq!(
        counts.hot_removes.load(Ordering::Relaxed),
        0,
        "the hot flow stays"
    );
    assert_eq!(counts.steers.load(Ordering::Relaxed), u64::from(STALE) + 1);
    assert!(stats.processed > u64::from(STALE), "{stats:?}");
}
