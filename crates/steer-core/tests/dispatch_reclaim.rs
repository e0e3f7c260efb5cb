//! A worker that dies with frames still in a dispatcher's ring to it (pushed
//! after its final drain, around the dispatcher's liveness check): the
//! dispatcher takes them back once it learns of the exit, releases them to
//! the pool and counts them as dropped. Nothing is stranded.

mod common;

use std::sync::atomic::Ordering;

use common::frame;
use steer_core::dispatch::FramePool;

struct Pool {
    frames: Vec<[u8; 8]>,
    released: Vec<usize>,
}

impl FramePool<usize> for Pool {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.frames[*d]
    }
    fn release(&mut self, d: usize) {
        self.released.push(d);
    }
}

#[test]
fn frames_left_in_a_dead_workers_ring_come_back_to_the_pool() {
    let shared = common::shared(2);
    let (mut d, _c0, c1) = common::two_cpu_dispatcher(&shared, 8, 64);
    // Flow 7 runs on CPU 1: its packets go through CPU 1's ring.
    shared.pins.pin_flow(common::flow_hash(7), 1);
    let mut pool = Pool {
        frames: (0..5).map(|seq| frame(7, seq)).collect(),
        released: Vec::new(),
    };
    let mut handled = 0;
    d.dispatch(
        &[0, 1, 2, 3, 4],
        &mut pool,
        &mut |_d: usize, _p: &mut Pool| handled += 1,
    );
    assert_eq!(handled, 0);
    assert!(pool.released.is_empty());

    // CPU 1's worker dies without draining; the runtime then bumps the count.
    drop(c1);
    shared.switches.worker_exits.fetch_add(1, Ordering::Release);
    d.dispatch(&[], &mut pool, &mut |_d: usize, _p: &mut Pool| handled += 1);
    assert_eq!(pool.released, [0, 1, 2, 3, 4], "in order, each once");
    let back: Vec<(u32, u32)> = pool
        .released
        .iter()
        .map(|&d| common::read(&pool.frames[d]))
        .collect();
    assert_eq!(back, (0..5).map(|seq| (7, seq)).collect::<Vec<_>>());
    assert_eq!(shared.stats.snapshot().per_cpu[0].1.worker_gone_drops, 5);
    assert_eq!(shared.stats.snapshot().per_cpu[0].1.dropped, 0);

    // Nothing is reclaimed twice, and the flow now runs elsewhere.
    d.dispatch(&[], &mut pool, &mut |_d: usize, _p: &mut Pool| handled += 1);
    assert_eq!(pool.released.len(), 5);
}
