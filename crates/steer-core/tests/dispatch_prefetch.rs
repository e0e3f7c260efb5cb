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

/// Descriptors carrying a tag: (frame index, flow hash the dispatcher wrote).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tagged(usize, u32);

struct TagPool(Vec<[u8; 8]>);

impl FramePool<Tagged> for TagPool {
    fn frame(&self, d: &Tagged) -> &[u8] {
        &self.0[d.0]
    }
    fn release(&mut self, _d: Tagged) {}
    fn tag_flow(&self, d: &mut Tagged, hash: u32) {
        d.1 = hash;
    }
}

#[test]
fn every_packet_reaches_its_handler_tagged_with_the_hash_it_was_steered_by() {
    let shared = common::shared(2);
    let (mut d, mut c0, mut c1) = common::two_cpu_dispatcher(&shared, 64, 64);
    // Flows spread over both CPUs: some run inline, the rest through rings.
    let mut pool = TagPool((0..32u32).map(|i| frame(i, 0)).collect());
    let batch: Vec<Tagged> = (0..32).map(|i| Tagged(i, 0)).collect();
    let mut seen = Vec::new();
    d.dispatch(&batch, &mut pool, &mut |t: Tagged, _p: &mut TagPool| {
        seen.push(t)
    });
    let inline = seen.len();
    let mut out = [Tagged::default(); 64];
    for c in [&mut c0, &mut c1] {
        let n = c.pop_batch(&mut out);
        seen.extend_from_slice(&out[..n]);
    }
    assert!(
        inline > 0 && inline < 32,
        "both paths taken: {inline} inline"
    );
    assert_eq!(seen.len(), 32);
    for t in seen {
        assert_eq!(t.1, common::flow_hash(t.0 as u32), "{t:?}");
    }
}
