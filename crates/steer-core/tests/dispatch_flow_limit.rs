//! The per-CPU flow limit in the dispatcher: one elephant flow and many
//! mice share a target CPU whose worker drains slower than they arrive.
//! With the limit on, the elephant's excess is dropped and counted as
//! `flow_limit_drops` once the ring is over half full, so the ring never
//! fills and every mouse gets through; with it off the ring fills and
//! mice are dropped with the elephant.

mod common;

use std::sync::atomic::Ordering;

use common::{frame, read};
use steer_core::dispatch::{FlowLimit, FramePool};
use steer_core::stats::LocalStats;

const ELEPHANT: u32 = 1;

struct Frames {
    frames: Vec<[u8; 8]>,
    released: Vec<usize>,
}

impl FramePool<usize> for Frames {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.frames[*d]
    }
    fn release(&mut self, d: usize) {
        self.released.push(d);
    }
}

/// What became of each kind of packet: (mice delivered, mice sent,
/// elephant delivered, elephant sent), and CPU 0's counters.
fn run(limit: Option<FlowLimit>) -> ((u32, u32, u32, u32), LocalStats) {
    let shared = common::shared(2);
    shared
        .switches
        .flow_limit
        .store(limit.is_some(), Ordering::Relaxed);
    // Everything runs on CPU 1, through the ring from this dispatcher.
    shared.pins.pin_port(0, 1);
    let (mut d, _c0, mut c1) = common::two_cpu_dispatcher(&shared, 256, 1024);
    if let Some(l) = &limit {
        d.set_flow_limit(l);
    }
    let mut pool = Frames {
        frames: Vec::new(),
        released: Vec::new(),
    };
    let (mut mice_sent, mut elephant_sent) = (0, 0);
    let (mut mice_got, mut elephant_got) = (0, 0);
    let mut out = [0usize; 8];
    let count = |n: usize, out: &[usize], pool: &Frames, m: &mut u32, e: &mut u32| {
        for &i in &out[..n] {
            if read(&pool.frames[i]).0 == ELEPHANT {
                *e += 1;
            } else {
                *m += 1;
            }
        }
    };
    for round in 0..2000u32 {
        // Six packets of the elephant, two of two different mice...
        let mut batch = Vec::new();
        for k in 0..8 {
            let flow = if k % 4 == 3 {
                100 + (round * 2 + k) % 500
            } else {
                ELEPHANT
            };
            if flow == ELEPHANT {
                elephant_sent += 1;
            } else {
                mice_sent += 1;
            }
            batch.push(pool.frames.len());
            pool.frames.push(frame(flow, round));
        }
        d.dispatch(&batch, &mut pool, &mut |_d: usize, _p: &mut Frames| {
            unreachable!("nothing runs on the dispatcher's CPU")
        });
        // ... and a worker that handles only three per round.
        let n = c1.pop_batch(&mut out[..3]);
        count(n, &out, &pool, &mut mice_got, &mut elephant_got);
    }
    loop {
        let n = c1.pop_batch(&mut out);
        if n == 0 {
            break;
        }
        count(n, &out, &pool, &mut mice_got, &mut elephant_got);
    }
    let stats = shared.stats.snapshot().per_cpu[0].1;
    assert_eq!(
        u64::from(mice_got + elephant_got) + stats.dropped + stats.flow_limit_drops,
        u64::from(mice_sent + elephant_sent),
        "every packet delivered or dropped with a counter: {stats:?}"
    );
    assert_eq!(
        pool.released.len() as u64,
        stats.dropped + stats.flow_limit_drops
    );
    ((mice_got, mice_sent, elephant_got, elephant_sent), stats)
}

#[test]
fn the_flow_limit_drops_the_elephants_excess_and_spares_the_mice() {
    let ((mice_got, mice_sent, elephant_got, elephant_sent), stats) =
        run(Some(FlowLimit::new(1024).unwrap()));
    assert_eq!(mice_got, mice_sent, "no mouse lost: {stats:?}");
    assert_eq!(stats.dropped, 0, "the ring never filled: {stats:?}");
    assert_eq!(
        u64::from(elephant_sent - elephant_got),
        stats.flow_limit_drops,
        "the elephant's excess, counted"
    );
    // The worker handles 3 of every 8: most of the elephant goes.
    assert!(
        stats.flow_limit_drops > u64::from(elephant_sent) / 2,
        "{stats:?}"
    );

    // Without the limit the ring fills and the mice are dropped with it.
    let ((mice_got, mice_sent, _, _), stats) = run(None);
    assert_eq!(stats.flow_limit_drops, 0);
    assert!(stats.dropped > 0, "{stats:?}");
    assert!(
        mice_got < mice_sent * 3 / 4,
        "{mice_got} of {mice_sent} mice through a full ring"
    );
}
