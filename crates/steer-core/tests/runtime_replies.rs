//! Replies staged by handlers leave in order when a flow moves between
//! workers: a ring's head passes a packet only after the worker flushed its
//! reply, and a flow that ran inline is flushed before it moves off the
//! dispatcher's CPU. Each scenario makes one worker's flush slow (a tx that
//! takes a while) exactly when the flow moves, so without the rule the next
//! packet's reply would leave first, every time.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::flow_hash;
use common::rig::{Feed, Frames, PoolHandle};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::{FramePool, Handler, Shared};
use steer_core::policy::Policy;
use steer_core::runtime::{RpsMode, Runtime, RuntimeConfig, Setup};

/// How long the slow flush takes: far longer than a round of the other
/// worker, so without the rule the reorder is certain.
const SLOW_FLUSH: Duration = Duration::from_millis(30);

/// What the handlers do beyond staging and sending.
#[derive(Clone, Copy)]
struct Script {
    /// The packet `(flow, seq)` whose reply makes its worker's flush slow.
    slow: (u32, u32),
    /// When handling `slow`, record its flow's consumer on this CPU.
    record_on: Option<CpuId>,
}

struct App {
    frames: Arc<Frames>,
    shared: Shared,
    script: Script,
    /// `(flow, seq)` in the order replies reached the "wire".
    wire: Arc<Mutex<Vec<(u32, u32)>>>,
    /// Told when a slow flush starts.
    flushing: Mutex<Sender<CpuId>>,
}

/// A handler that stages replies and sends them at `flush`.
struct Replier {
    cpu: CpuId,
    frames: Arc<Frames>,
    shared: Shared,
    script: Script,
    wire: Arc<Mutex<Vec<(u32, u32)>>>,
    flushing: Sender<CpuId>,
    staged: Vec<(u32, u32)>,
}

impl Handler<usize, PoolHandle> for Replier {
    fn handle(&mut self, d: usize, pool: &mut PoolHandle) {
        let (flow, seq) = common::read(&self.frames.bytes[d]);
        if (flow, seq) == self.script.slow {
            if let Some(cpu) = self.script.record_on {
                let all = CpuSet::first(2);
                self.shared
                    .desired
                    .record(flow_hash(flow), cpu, &all, &self.shared.layout)
                    .unwrap();
            }
        }
        self.staged.push((flow, seq));
        pool.release(d);
    }

    fn flush(&mut self, _pool: &mut PoolHandle) {
        if self.staged.contains(&self.script.slow) {
            let _ = self.flushing.send(self.cpu);
            std::thread::sleep(SLOW_FLUSH);
        }
        self.wire.lock().unwrap().extend(self.staged.drain(..));
    }
}

impl Setup<usize> for App {
    common::rig::frames_setup!();
    type Handler = Replier;
    fn handler(&self, cpu: CpuId) -> Replier {
        Replier {
            cpu,
            frames: self.frames.clone(),
            shared: self.shared.clone(),
            script: self.script,
            wire: self.wire.clone(),
            flushing: self.flushing.lock().unwrap().clone(),
            staged: Vec::new(),
        }
    }
}

/// Two busy-polling workers on CPUs 0 and 1 (two LLCs), rx queue `i`
/// dispatched on CPU `i`, flows without a desire kept on the dispatcher's
/// CPU, policy `always`.
struct Harness {
    rt: Runtime<usize, App>,
    feeds: [Feed; 2],
    frames: Arc<Frames>,
    wire: Arc<Mutex<Vec<(u32, u32)>>>,
    flushing: Receiver<CpuId>,
}

impl Harness {
    fn start(script: Script) -> Self {
        let cfg = RuntimeConfig {
            cpus: CpuSet::first(2),
            ring_capacity: 64,
            policy: Policy::Always,
            rps: RpsMode::Local,
            busy_poll: true,
            ..Default::default()
        };
        let shared = cfg
            .shared(Arc::new(CpuLayout::uniform(2, 1).unwrap()))
            .unwrap();
        let frames = Frames::shared((0..PACKETS).map(|seq| common::frame(FLOW, seq)).collect());
        let wire = Arc::new(Mutex::new(Vec::new()));
        let (tx, flushing) = channel();
        let app = Arc::new(App {
            frames: frames.clone(),
            shared: shared.clone(),
            script,
            wire: wire.clone(),
            flushing: Mutex::new(tx),
        });
        let feeds = [Feed::default(), Feed::default()];
        let rt = Runtime::start(cfg, shared, app, common::rig::sources(&feeds)).unwrap();
        Self {
            rt,
            feeds,
            frames,
            wire,
            flushing,
        }
    }

    /// Feeds packets `seqs` of [`FLOW`] on rx queue `rxq`, in one poll's
    /// reach.
    fn feed(&self, rxq: usize, seqs: &[usize]) {
        self.feeds[rxq].0.lock().unwrap().extend(seqs);
    }

    fn record(&self, flow: u32, cpu: CpuId) {
        let shared = self.rt.shared();
        shared
            .desired
            .record(flow_hash(flow), cpu, &CpuSet::first(2), &shared.layout)
            .unwrap();
    }

    /// Waits until `n` replies reached the wire, stops, returns them.
    fn finish(self, n: usize) -> Vec<(u32, u32)> {
        let start = Instant::now();
        while self.wire.lock().unwrap().len() < n {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "replies: {:?}",
                self.wire.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let stats = self.rt.stats().total;
        self.rt.stop();
        assert_eq!(self.frames.released.load(Ordering::Relaxed), n);
        eprintln!(
            "hook calls {}, held back {}, fast path {}",
            stats.hook_calls, stats.held_back, stats.fast_path
        );
        let wire = self.wire.lock().unwrap().clone();
        wire
    }
}

const FLOW: u32 = 5;
/// Packets of [`FLOW`] the tests may send.
const PACKETS: u32 = 2;

#[test]
fn a_ring_head_passes_a_packet_only_after_its_reply_left() {
    // Packet 0 goes through CPU 1's ring; CPU 1 is slow to send its reply.
    let h = Harness::start(Script {
        slow: (FLOW, 0),
        record_on: None,
    });
    h.record(FLOW, 1);
    h.feed(0, &[0]);
    assert_eq!(
        h.flushing.recv_timeout(Duration::from_secs(5)).unwrap(),
        1,
        "packet 0 answered on CPU 1"
    );
    // Its handler returned and the reply is being sent. The consumer moves
    // to CPU 0 (the dispatcher's own): packet 1 must not overtake.
    h.record(FLOW, 0);
    h.feed(0, &[1]);
    let wire = h.finish(2);
    assert_eq!(wire, [(FLOW, 0), (FLOW, 1)], "replies left out of order");
}

#[test]
fn a_flow_run_inline_is_flushed_before_it_moves_off_the_cpu() {
    // Both packets arrive in one batch on CPU 0, run inline there; handling
    // packet 0 moves the flow's consumer to CPU 1, and CPU 0 is slow to
    // send packet 0's reply.
    let h = Harness::start(Script {
        slow: (FLOW, 0),
        record_on: Some(1),
    });
    h.feed(0, &[0, 1]);
    assert_eq!(
        h.flushing.recv_timeout(Duration::from_secs(5)).unwrap(),
        0,
        "packet 0 answered on CPU 0"
    );
    let wire = h.finish(2);
    assert_eq!(wire, [(FLOW, 0), (FLOW, 1)], "replies left out of order");
}
