//! The dispatcher asks its pool to prefetch each frame of a batch once,
//! before it first reads the frame and at most `PREFETCH_AHEAD` frames
//! ahead of the one it is working on, so the cache misses of a batch
//! overlap (frames the kernel wrote on another CPU start cold).

mod common;

use std::cell::RefCell;

use common::{frame, ByFlowId};
use steer_core::cpu::CpuSet;
use steer_core::dispatch::{Dispatcher, FramePool, Shared, PREFETCH_AHEAD};
use steer_core::ring;
use steer_core::table::RxFlowTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Prefetch(usize),
    Read(usize),
}

struct Pool {
    frames: Vec<[u8; 8]>,
    events: RefCell<Vec<Event>>,
}

impl FramePool<usize> for Pool {
    fn frame(&self, d: &usize) -> &[u8] {
        self.events.borrow_mut().push(Event::Read(*d));
        &self.frames[*d]
    }
    fn release(&mut self, _d: usize) {}
    fn prefetch(&self, d: &usize) {
        self.events.borrow_mut().push(Event::Prefetch(*d));
    }
}

fn dispatcher(shared: &Shared) -> Dispatcher<usize, ByFlowId, steer_core::hook::NoopHook> {
    let (p0, _c0) = ring::channel(64).unwrap();
    let (p1, _c1) = ring::channel(64).unwrap();
    // The consumers are dropped: packets steered to CPU 1 are reclaimed and
    // counted, which does not matter here.
    Dispatcher::new(
        0,
        0,
        ByFlowId,
        RxFlowTable::new(0, 64).unwrap(),
        vec![Some(p0), Some(p1)],
        CpuSet::first(2),
        shared.clone(),
    )
}

#[test]
fn every_frame_is_prefetched_once_before_it_is_read() {
    let shared = common::shared(2);
    let mut d = dispatcher(&shared);
    for n in [0usize, 1, PREFETCH_AHEAD - 1, PREFETCH_AHEAD, 13, 64] {
        let mut pool = Pool {
            frames: (0..n as u32).map(|i| frame(i, 0)).collect(),
            events: RefCell::new(Vec::new()),
        };
        let batch: Vec<usize> = (0..n).collect();
        d.dispatch(&batch, &mut pool, &mut |_d: usize, _p: &mut Pool| {});
        let events = pool.events.into_inner();
        for &i in &batch {
            let prefetched: Vec<usize> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| **e == Event::Prefetch(i))
                .map(|(at, _)| at)
                .collect();
            assert_eq!(prefetched.len(), 1, "batch {n}: frame {i} once: {events:?}");
            let first_read = events
                .iter()
                .position(|e| *e == Event::Read(i))
                .expect("every frame is classified");
            assert!(prefetched[0] < first_read, "batch {n}: {events:?}");
            // Not too early: frames read before the prefetch of frame i
            // are at least i - PREFETCH_AHEAD.
            let read_before = events[..prefetched[0]]
                .iter()
                .filter(|e| matches!(e, Event::Read(_)))
                .count();
            assert!(
                read_before + PREFETCH_AHEAD >= i,
                "batch {n}: frame {i} prefetched after {read_before} reads: {events:?}"
            );
        }
    }
}
