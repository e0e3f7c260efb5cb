//! A dispatcher whose own CPU goes offline (CPU hotplug, or its worker
//! gone) with RPS off (`RpsMode::Local`: flows stay on the rx queue's CPU):
//! its flows move to a CPU that still has a worker, in order (only once
//! nothing of theirs is queued), and come back when the CPU does.

mod common;

use common::{frame, ByFlowId};
use steer_core::cpu::CpuSet;
use steer_core::dispatch::{Dispatcher, FramePool};
use steer_core::ring;
use steer_core::table::RxFlowTable;

struct Frames(Vec<[u8; 8]>);

impl FramePool<usize> for Frames {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.0[*d]
    }
    fn release(&mut self, _d: usize) {
        panic!("no frame is dropped here");
    }
}

#[test]
fn flows_of_an_offline_dispatcher_cpu_move_to_a_live_one_and_come_back() {
    let shared = common::shared(2);
    let (p0, mut c0) = ring::channel(64).unwrap();
    let (p1, _c1) = ring::channel(64).unwrap();
    // The dispatcher of an rx queue on CPU 1, RPS off.
    let mut d = Dispatcher::new(
        1,
        0,
        ByFlowId,
        RxFlowTable::new(0, 256).unwrap(),
        vec![Some(p0), Some(p1)],
        CpuSet::new(),
        shared.clone(),
    );
    let mut pool = Frames((0..16u32).map(|f| frame(f, 0)).collect());
    let batch: Vec<usize> = (0..16).collect();
    let run = |d: &mut Dispatcher<usize, ByFlowId>, pool: &mut Frames| {
        let mut n = 0;
        d.dispatch(&batch, pool, &mut |_d: usize, _p: &mut Frames| n += 1);
        n
    };
    assert_eq!(run(&mut d, &mut pool), 16, "its own CPU: every flow inline");

    shared.layout.set_online(1, false);
    assert_eq!(run(&mut d, &mut pool), 0, "nothing runs on the offline CPU");
    let mut out = [0usize; 64];
    assert_eq!(c0.pop_batch(&mut out), 16, "every flow moved to CPU 0");

    shared.layout.set_online(1, true);
    assert_eq!(
        run(&mut d, &mut pool),
        16,
        "back on CPU 1 once CPU 0 drained"
    );
    let moves = shared.stats.snapshot().per_cpu[1].1.hook_calls;
    assert_eq!(moves, 16 * 3, "placed, moved away, moved back");
}
