//! Wire order across tx queues in zero-copy mode, on a simulated device.
//!
//! Each worker's handler hands its replies at `flush` to its own simulated
//! NIC tx queue, which completes them later, in order: a frame completes
//! only once its queue's gate is open (the test opens it) and the queue has
//! been polled (`tx_progress`) a number of times since the frame was
//! flushed. The wire is every frame in completion order across both NICs.
//! A flow moves from one worker to the other mid-stream while its last
//! reply on the old worker is still queued in the NIC:
//!
//! - with progress reported (`Some`, zero-copy), the old CPU's ring head
//!   is held until that reply completed, so the flow stays put and its next
//!   reply queues behind; a flow that ran inline waits for its replies to
//!   complete before it moves. The wire carries the replies in sequence.
//! - without (`None`, the copy-mode contract) under the same delay, the
//!   next reply leaves from the other NIC first: the wire order breaks, so
//!   the mechanism is what keeps it.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::flow_hash;
use common::rig::{Feed, Frames, PoolHandle};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::{FramePool, Handler, Shared, TxProgress};
use steer_core::policy::Policy;
use steer_core::runtime::{RpsMode, Runtime, RuntimeConfig, Setup};

type Reply = (u32, u32);

/// One simulated NIC tx queue.
#[derive(Default)]
struct Nic {
    /// Frames flushed, not completed, with the poll count at their flush.
    queued: std::collections::VecDeque<(Reply, u64)>,
    /// Every frame flushed to this queue, in order.
    flushed_log: Vec<Reply>,
    flushed: u64,
    completed: u64,
    polls: u64,
    /// Polls a frame waits after its flush before it may complete.
    delay_polls: u64,
    /// Frames complete only while the gate is open.
    gate_open: bool,
}

/// Both NICs and the wire, under one lock so completion order is total.
#[derive(Default)]
struct Device {
    nics: [Nic; 2],
    wire: Vec<Reply>,
}

impl Device {
    /// A poll of `cpu`'s queue: completes, in order, what may complete.
    fn poll(&mut self, cpu: CpuId) -> TxProgress {
        let nic = &mut self.nics[cpu];
        nic.polls += 1;
        while let Some(&(reply, at)) = nic.queued.front() {
            if !nic.gate_open || nic.polls - at < nic.delay_polls {
                break;
            }
            nic.queued.pop_front();
            nic.completed += 1;
            self.wire.push(reply);
        }
        TxProgress {
            flushed: nic.flushed,
            completed: nic.completed,
        }
    }

    /// After the runtime stopped: whatever is still queued completes now.
    fn drain(&mut self) {
        for nic in &mut self.nics {
            self.wire.extend(nic.queued.drain(..).map(|(r, _)| r));
        }
    }

    fn flushed_total(&self) -> u64 {
        self.nics.iter().map(|n| n.flushed).sum()
    }
}

#[derive(Clone, Copy)]
struct Script {
    /// Report progress (zero-copy) or not (`None`).
    report: bool,
    /// Workers busy-poll (else they spin a little, then sleep).
    busy_poll: bool,
    /// When handling packet 0 of [`FLOW`], record its consumer here.
    record_on: Option<CpuId>,
}

struct App {
    frames: Arc<Frames>,
    shared: Shared,
    script: Script,
    device: Arc<Mutex<Device>>,
    /// Told which CPU flushed packet 0's reply.
    flushing: Mutex<Sender<CpuId>>,
}

/// Stages replies; `flush` hands them to its CPU's simulated NIC.
struct Replier {
    cpu: CpuId,
    frames: Arc<Frames>,
    shared: Shared,
    script: Script,
    device: Arc<Mutex<Device>>,
    flushing: Sender<CpuId>,
    staged: Vec<Reply>,
}

impl Handler<usize, PoolHandle> for Replier {
    fn handle(&mut self, d: usize, pool: &mut PoolHandle) {
        let (flow, seq) = common::read(&self.frames.bytes[d]);
        if (flow, seq) == (FLOW, 0) {
            if let Some(cpu) = self.script.record_on {
                self.shared
                    .desired
                    .record(flow_hash(flow), cpu, &CpuSet::first(2), &self.shared.layout)
                    .unwrap();
            }
        }
        self.staged.push((flow, seq));
        pool.release(d);
    }

    fn flush(&mut self, _pool: &mut PoolHandle) {
        if self.staged.is_empty() {
            return;
        }
        let mut device = self.device.lock().unwrap();
        let nic = &mut device.nics[self.cpu];
        for reply in self.staged.drain(..) {
            nic.queued.push_back((reply, nic.polls));
            nic.flushed_log.push(reply);
            nic.flushed += 1;
            if reply == (FLOW, 0) {
                let _ = self.flushing.send(self.cpu);
            }
        }
    }

    fn tx_progress(&mut self, _pool: &mut PoolHandle) -> Option<TxProgress> {
        // The device moves on whenever the worker looks, reported or not.
        let progress = self.device.lock().unwrap().poll(self.cpu);
        self.script.report.then_some(progress)
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
            device: self.device.clone(),
            flushing: self.flushing.lock().unwrap().clone(),
            staged: Vec::new(),
        }
    }
}

const FLOW: u32 = 5;
const PACKETS: u32 = 2;

/// Two busy-polling workers on CPUs 0 and 1 (two LLCs), rx queue `i`
/// dispatched on CPU `i`, flows without a desire kept on the dispatcher's
/// CPU, policy `always`.
struct Harness {
    rt: Runtime<usize, App>,
    feeds: [Feed; 2],
    frames: Arc<Frames>,
    device: Arc<Mutex<Device>>,
    flushing: Receiver<CpuId>,
}

impl Harness {
    /// `nics`: each NIC's delay in polls and whether its gate starts open.
    fn start(script: Script, nics: [(u64, bool); 2]) -> Self {
        let cfg = RuntimeConfig {
            cpus: CpuSet::first(2),
            ring_capacity: 64,
            policy: Policy::Always,
            rps: RpsMode::Local,
            busy_poll: script.busy_poll,
            // Long: a worker that slept with heads held would be seen.
            sleep_timeout: Duration::from_secs(30),
            ..Default::default()
        };
        let shared = cfg
            .shared(Arc::new(CpuLayout::uniform(2, 1).unwrap()))
            .unwrap();
        let frames = Frames::shared((0..PACKETS).map(|seq| common::frame(FLOW, seq)).collect());
        let mut device = Device::default();
        for (nic, (delay, open)) in device.nics.iter_mut().zip(nics) {
            nic.delay_polls = delay;
            nic.gate_open = open;
        }
        let device = Arc::new(Mutex::new(device));
        let (tx, flushing) = channel();
        let app = Arc::new(App {
            frames: frames.clone(),
            shared: shared.clone(),
            script,
            device: device.clone(),
            flushing: Mutex::new(tx),
        });
        let feeds = [Feed::default(), Feed::default()];
        let rt = Runtime::start(cfg, shared, app, common::rig::sources(&feeds)).unwrap();
        Self {
            rt,
            feeds,
            frames,
            device,
            flushing,
        }
    }

    fn feed(&self, rxq: usize, seqs: &[usize]) {
        self.feeds[rxq].0.lock().unwrap().extend(seqs);
        // Rx queue `i` is dispatched on CPU `i`; a sleeping worker wakes.
        if let Some(bell) = self.rt.doorbell(rxq) {
            bell.ring();
        }
    }

    fn record(&self, flow: u32, cpu: CpuId) {
        let shared = self.rt.shared();
        shared
            .desired
            .record(flow_hash(flow), cpu, &CpuSet::first(2), &shared.layout)
            .unwrap();
    }

    /// Waits (at most 5 s) until `done` holds on the device.
    fn wait_for(&self, what: &str, done: impl Fn(&Device) -> bool) {
        let start = Instant::now();
        while !done(&self.device.lock().unwrap()) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn open_gate(&self, cpu: CpuId) {
        self.device.lock().unwrap().nics[cpu].gate_open = true;
    }

    /// Stops the runtime, completes what is left, returns the wire and
    /// each NIC's flush log.
    fn finish(self) -> (Vec<Reply>, [Vec<Reply>; 2]) {
        self.rt.stop();
        assert_eq!(
            self.frames.released.load(Ordering::Relaxed),
            PACKETS as usize
        );
        let mut device = self.device.lock().unwrap();
        device.drain();
        let logs = [
            device.nics[0].flushed_log.clone(),
            device.nics[1].flushed_log.clone(),
        ];
        (device.wire.clone(), logs)
    }
}

/// Packet 0 goes through CPU 1's ring and its reply sits in NIC 1 (gate
/// closed); the flow's consumer then moves to CPU 0 and packet 1 arrives.
fn ring_move(report: bool, busy_poll: bool) -> (Vec<Reply>, [Vec<Reply>; 2]) {
    let h = Harness::start(
        Script {
            report,
            busy_poll,
            record_on: None,
        },
        [(0, true), (0, false)],
    );
    h.record(FLOW, 1);
    h.feed(0, &[0]);
    assert_eq!(
        h.flushing.recv_timeout(Duration::from_secs(5)).unwrap(),
        1,
        "packet 0 answered on CPU 1"
    );
    // Long enough for CPU 1 to publish its head if it is going to.
    std::thread::sleep(Duration::from_millis(50));
    h.record(FLOW, 0);
    h.feed(0, &[1]);
    h.wait_for("packet 1 flushed", |d| d.flushed_total() == 2);
    // Whatever completes on its own has done so (NIC 0 completes at its
    // first poll); then NIC 1 lets packet 0 go.
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !h.device.lock().unwrap().wire.contains(&(FLOW, 0)),
        "packet 0 completed behind a closed gate"
    );
    h.open_gate(1);
    if report {
        // Nothing more arrives: CPU 1 polls its held heads' progress in
        // idle rounds (it must not sleep past them), which completes both.
        h.wait_for("both replies on the wire", |d| d.wire.len() == 2);
    }
    h.finish()
}

#[test]
fn zero_copy_a_ring_head_waits_for_the_reply_to_complete() {
    let (wire, logs) = ring_move(true, true);
    assert_eq!(wire, [(FLOW, 0), (FLOW, 1)], "replies left out of order");
    // The flow could not move while packet 0's reply was in NIC 1: packet
    // 1 was answered there too.
    assert_eq!(logs[1], [(FLOW, 0), (FLOW, 1)]);
}

#[test]
fn zero_copy_a_worker_with_held_heads_naps_instead_of_sleeping() {
    let (wire, logs) = ring_move(true, false);
    assert_eq!(wire, [(FLOW, 0), (FLOW, 1)], "replies left out of order");
    assert_eq!(logs[1], [(FLOW, 0), (FLOW, 1)]);
}

#[test]
fn without_progress_a_ring_move_reorders_the_wire() {
    // The same delay with the copy-mode contract: CPU 1's head passed
    // packet 0 at its flush, the flow moved, and packet 1's reply left NIC
    // 0 while packet 0's was still queued in NIC 1.
    let (wire, logs) = ring_move(false, true);
    assert_eq!(logs[0], [(FLOW, 1)], "the flow moved to CPU 0");
    assert_eq!(wire, [(FLOW, 1), (FLOW, 0)], "the mechanism was not needed");
}

/// Both packets arrive in one batch on CPU 0 and run inline; handling
/// packet 0 moves the flow's consumer to CPU 1. NIC 0 completes a frame
/// only after a few polls.
fn inline_move(report: bool) -> (Vec<Reply>, [Vec<Reply>; 2]) {
    let h = Harness::start(
        Script {
            report,
            busy_poll: true,
            record_on: Some(1),
        },
        [(3, true), (0, true)],
    );
    h.feed(0, &[0, 1]);
    h.wait_for("packet 1 on the wire", |d| d.wire.contains(&(FLOW, 1)));
    h.finish()
}

#[test]
fn zero_copy_a_flow_run_inline_moves_once_its_replies_completed() {
    let (wire, logs) = inline_move(true);
    assert_eq!(logs, [vec![(FLOW, 0)], vec![(FLOW, 1)]], "the flow moved");
    assert_eq!(wire, [(FLOW, 0), (FLOW, 1)], "replies left out of order");
}

#[test]
fn without_progress_an_inline_move_reorders_the_wire() {
    let (wire, logs) = inline_move(false);
    assert_eq!(logs, [vec![(FLOW, 0)], vec![(FLOW, 1)]], "the flow moved");
    assert_eq!(wire, [(FLOW, 1), (FLOW, 0)], "the mechanism was not needed");
}
