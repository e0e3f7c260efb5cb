//! Side work (`Handler::poll_side`): work that reaches a worker outside its
//! rx queues and rings (the engine's slow path). A worker asleep with a
//! long timeout is woken by its doorbell (`Runtime::doorbell`) once side
//! work is queued, polls it in its round, and flushes after it; a worker
//! never sleeps on side work it was told about (`Handler::side_pending`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::rig::{Feed, Frames, PoolHandle};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::{FramePool, Handler};
use steer_core::runtime::{Runtime, RuntimeConfig, Setup};
use steer_core::wake::{Sleeper, ThreadSleeper};

/// Side work queued per CPU, and what the handlers did with it.
#[derive(Default)]
struct Side {
    queued: Mutex<Vec<VecDeque<u32>>>,
    /// (cpu, item) in the order handled.
    done: Mutex<Vec<(CpuId, u32)>>,
    /// Flushes after a round that polled side work.
    flushed_after_side: AtomicUsize,
}

struct App {
    frames: Arc<Frames>,
    side: Arc<Side>,
}

struct SideHandler {
    cpu: CpuId,
    side: Arc<Side>,
    unflushed: bool,
    /// Polls that take nothing before the first that takes (CPU 0: past
    /// its idle spins, so it would sleep on the work if it did not ask
    /// whether side work is pending).
    blind_polls: usize,
}

impl Handler<usize, PoolHandle> for SideHandler {
    fn handle(&mut self, d: usize, pool: &mut PoolHandle) {
        pool.release(d);
    }
    fn flush(&mut self, _pool: &mut PoolHandle) {
        if std::mem::take(&mut self.unflushed) {
            self.side.flushed_after_side.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn poll_side(&mut self, _pool: &mut PoolHandle) -> usize {
        if self.blind_polls > 0 {
            self.blind_polls -= 1;
            return 0;
        }
        let taken: Vec<u32> = {
            let mut q = self.side.queued.lock().unwrap();
            let q = &mut q[self.cpu];
            let n = q.len().min(2); // a few per round
            q.drain(..n).collect()
        };
        let mut done = self.side.done.lock().unwrap();
        done.extend(taken.iter().map(|&i| (self.cpu, i)));
        self.unflushed |= !taken.is_empty();
        taken.len()
    }
    fn side_pending(&self) -> bool {
        !self.side.queued.lock().unwrap()[self.cpu].is_empty()
    }
}

impl Setup<usize> for App {
    common::rig::frames_setup!();
    type Handler = SideHandler;
    fn sleeper(&self, _cpu: CpuId) -> Box<dyn Sleeper> {
        Box::new(ThreadSleeper::current())
    }
    fn handler(&self, cpu: CpuId) -> Self::Handler {
        SideHandler {
            cpu,
            side: Arc::clone(&self.side),
            unflushed: false,
            blind_polls: if cpu == 0 { 50 } else { 0 },
        }
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn side_work_wakes_a_sleeping_worker_through_its_doorbell_and_is_flushed() {
    let side = Arc::new(Side::default());
    // CPU 0 has side work from the start, which its first polls miss.
    *side.queued.lock().unwrap() = vec![VecDeque::from([9]), VecDeque::new()];
    let app = Arc::new(App {
        frames: Frames::shared(Vec::new()),
        side: Arc::clone(&side),
    });
    let feeds = [Feed::default(), Feed::default()];
    let rt = Runtime::start_with_layout(
        RuntimeConfig {
            cpus: CpuSet::first(2),
            ring_capacity: 64,
            // Asleep, only a doorbell wakes a worker within the test.
            sleep_timeout: Duration::from_secs(30),
            idle_spins: 4,
            ..Default::default()
        },
        Arc::new(CpuLayout::uniform(2, 1).unwrap()),
        app,
        common::rig::sources(&feeds),
    )
    .unwrap();
    assert!(rt.doorbell(5).is_none(), "no worker on CPU 5");
    let bell = rt.doorbell(1).expect("a worker on CPU 1");
    wait_for("CPU 1 asleep", Duration::from_secs(5), || {
        bell.is_sleeping()
    });
    // Queue first, then ring: the worker finds all five, two per round.
    side.queued.lock().unwrap()[1].extend(0..5);
    bell.ring();
    let start = Instant::now();
    wait_for("side work done", Duration::from_secs(10), || {
        side.done
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| *c == 1)
            .count()
            == 5
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "woken by the doorbell, not the sleep timeout"
    );
    assert_eq!(
        side.done
            .lock()
            .unwrap()
            .iter()
            .filter(|(cpu, _)| *cpu == 1)
            .copied()
            .collect::<Vec<_>>(),
        (0..5).map(|i| (1, i)).collect::<Vec<_>>(),
        "in order, on the worker it was queued to"
    );
    wait_for("flushed", Duration::from_secs(5), || {
        side.flushed_after_side.load(Ordering::SeqCst) >= 1
    });
    // CPU 0 never slept on the work its blind polls missed (no ring: only
    // `side_pending` kept it awake), and took it once it looked.
    wait_for("pending side work found", Duration::from_secs(5), || {
        side.done.lock().unwrap().contains(&(0, 9))
    });
    rt.stop();
}
