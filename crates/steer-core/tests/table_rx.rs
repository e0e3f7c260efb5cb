//! The per-rx-queue flow table: the ordering rule for moves, the hook calls,
//! and expiry by the sweep. Queues are modelled by plain counters.

use std::cell::RefCell;

use proptest::prelude::*;
use steer_core::cpu::{CpuId, CpuLayout};
use steer_core::hook::{FilterId, HookEvent, RecordingHook};
use steer_core::table::{RxFlowTable, SteerAction};

/// Per-CPU queues as two counters each; `None` models a CPU without a worker.
struct Queues {
    enq: Vec<u64>,
    deq: Vec<Option<u64>>,
}

impl Queues {
    fn new(n: usize) -> Self {
        Self {
            enq: vec![0; n],
            deq: vec![Some(0); n],
        }
    }
    fn heads(&self) -> impl Fn(CpuId) -> Option<u64> + '_ {
        |c| self.deq.get(c).copied().flatten()
    }
    fn push(&mut self, cpu: CpuId) -> u64 {
        self.enq[cpu] += 1;
        self.enq[cpu]
    }
    fn drain(&mut self, cpu: CpuId) {
        self.deq[cpu] = Some(self.enq[cpu]);
    }
}

const FLOW: u32 = 0x5eed_0042;

#[test]
fn first_packet_places_flow_and_calls_hook() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let q = Queues::new(4);
    let mut t = RxFlowTable::with_hook(3, 64, RecordingHook::default()).unwrap();
    let s = t.steer(FLOW, Some(2), &l, &q.heads(), 0);
    assert_eq!(s.cpu, Some(2));
    assert_eq!(s.action, SteerAction::Moved { from: None });
    assert_eq!(t.filter_of(s.bucket), Some(FilterId(0)));
    match t.hook().events() {
        [HookEvent::Steer(mv, Ok(Some(FilterId(0))))] => {
            assert_eq!((mv.rxq, mv.hash, mv.from, mv.to), (3, FLOW, None, 2));
            assert_eq!(mv.bucket, s.bucket);
        }
        other => panic!("unexpected hook calls {other:?}"),
    }
}

#[test]
fn the_key_is_asked_for_only_when_the_flow_moves_and_reaches_the_hook() {
    use steer_core::flow::flow_key;
    use steer_core::packet::build::FrameBuilder;
    let frame = FrameBuilder::udp([10, 0, 0, 2].into(), [10, 0, 0, 1].into(), 4000, 53).build();
    let key = flow_key(&frame).unwrap();
    let l = CpuLayout::uniform(4, 2).unwrap();
    let q = Queues::new(4);
    let mut t = RxFlowTable::with_hook(1, 64, RecordingHook::default()).unwrap();
    let asked = std::cell::Cell::new(0);
    let ask = || {
        asked.set(asked.get() + 1);
        key
    };
    t.steer_keyed(FLOW, Some(2), &l, &q.heads(), 0, ask);
    t.steer_keyed(FLOW, Some(2), &l, &q.heads(), 0, ask);
    t.steer_keyed(FLOW, Some(3), &l, &q.heads(), 0, ask);
    assert_eq!(asked.get(), 2, "placed, stayed, moved");
    let keys: Vec<_> = t
        .hook()
        .events()
        .iter()
        .map(|e| match e {
            HookEvent::Steer(mv, _) => (mv.key, mv.from, mv.to, mv.rxq),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, [(key, None, 2, 1), (key, Some(2), 3, 1)]);
}

#[test]
fn move_held_back_until_old_queue_passes_last_qtail() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let mut q = Queues::new(4);
    let mut t = RxFlowTable::with_hook(0, 64, RecordingHook::default()).unwrap();
    // Two packets queued on CPU 0.
    for _ in 0..2 {
        let s = t.steer(FLOW, Some(0), &l, &q.heads(), 0);
        assert_eq!(s.cpu, Some(0));
        let tail = q.push(0);
        t.note_enqueued(s.bucket, tail);
    }
    // Consumer moves to CPU 3; one of the two packets is still queued.
    q.deq[0] = Some(1);
    let s = t.steer(FLOW, Some(3), &l, &q.heads(), 0);
    assert_eq!(s.cpu, Some(0));
    assert_eq!(s.action, SteerAction::HeldBack { desired: 3 });
    assert!(t.has_queued(s.bucket, &q.heads()));
    let tail = q.push(0);
    t.note_enqueued(s.bucket, tail);
    // Draining the first two is not enough: the held-back packet is queued too.
    q.deq[0] = Some(2);
    assert_eq!(
        t.steer(FLOW, Some(3), &l, &q.heads(), 0).action,
        SteerAction::HeldBack { desired: 3 }
    );
    q.drain(0);
    assert!(!t.has_queued(s.bucket, &q.heads()));
    let s = t.steer(FLOW, Some(3), &l, &q.heads(), 0);
    assert_eq!(s.cpu, Some(3));
    assert_eq!(s.action, SteerAction::Moved { from: Some(0) });
    // On the new CPU nothing of the flow is queued yet.
    assert!(!t.has_queued(s.bucket, &q.heads()));
    let st = t.stats();
    assert_eq!((st.moves, st.held_back, st.hook_calls), (2, 2, 2));
    // The hook updated the bucket's filter in place.
    assert_eq!(t.hook().live_filters(), &[FilterId(0)]);
}

#[test]
fn offline_cpu_keeps_flow_until_drained_gone_queue_moves_at_once() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let mut q = Queues::new(4);
    let mut t = RxFlowTable::new(0, 64).unwrap();
    let s = t.steer(FLOW, Some(0), &l, &q.heads(), 0);
    t.note_enqueued(s.bucket, q.push(0));
    l.set_online(0, false);
    // CPU 0 is offline but its queue still holds the flow's packet: moving
    // now would let the next packet overtake it.
    let s = t.steer(FLOW, Some(1), &l, &q.heads(), 0);
    assert_eq!(
        (s.cpu, s.action),
        (Some(0), SteerAction::HeldBack { desired: 1 })
    );
    let s = t.steer(FLOW, None, &l, &q.heads(), 0);
    assert_eq!((s.cpu, s.action), (Some(0), SteerAction::Stayed));
    q.drain(0);
    let s = t.steer(FLOW, Some(1), &l, &q.heads(), 0);
    assert_eq!(s.action, SteerAction::Moved { from: Some(0) });
    t.note_enqueued(s.bucket, q.push(1));
    q.deq[1] = None; // worker of CPU 1 gone, its packet returned to the pool
    let s = t.steer(FLOW, Some(2), &l, &q.heads(), 0);
    assert_eq!(s.action, SteerAction::Moved { from: Some(1) });
    assert_eq!(t.stats().held_back, 1);
}

#[test]
fn unusable_desire_keeps_current_or_gives_no_target() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let q = Queues::new(4);
    let mut t = RxFlowTable::new(0, 64).unwrap();
    assert_eq!(
        t.steer(FLOW, None, &l, &q.heads(), 0).action,
        SteerAction::NoTarget
    );
    t.steer(FLOW, Some(1), &l, &q.heads(), 0);
    l.set_online(2, false);
    for desired in [None, Some(2), Some(99)] {
        let s = t.steer(FLOW, desired, &l, &q.heads(), 0);
        assert_eq!((s.cpu, s.action), (Some(1), SteerAction::Stayed));
    }
    assert_eq!(
        t.steer(0, Some(1), &l, &q.heads(), 0).action,
        SteerAction::NoTarget
    );
}

#[test]
fn sweep_expires_idle_drained_entries_and_removes_hook_state() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let mut q = Queues::new(4);
    let mut t = RxFlowTable::with_hook(0, 16, RecordingHook::default()).unwrap();
    let a = 0x100; // bucket 0
    let b = 0x201; // bucket 1
    let sa = t.steer(a, Some(1), &l, &q.heads(), 10);
    t.note_enqueued(sa.bucket, q.push(1));
    let sb = t.steer(b, Some(2), &l, &q.heads(), 10);
    t.note_enqueued(sb.bucket, q.push(2));
    // Not idle long enough: nothing expires.
    let r = t.sweep(&l, &q.heads(), 50, 100, 16);
    assert_eq!((r.scanned, r.expired), (16, 0));
    // Idle, but a's packet is still queued on CPU 1: only b expires.
    q.drain(2);
    let r = t.sweep(&l, &q.heads(), 200, 100, 16);
    assert_eq!((r.expired, r.removed), (1, 1));
    assert_eq!(t.cpu_of(sb.bucket), None);
    assert_eq!(t.cpu_of(sa.bucket), Some(1));
    q.drain(1);
    let r = t.sweep(&l, &q.heads(), 200, 100, 16);
    assert_eq!(r.expired, 1);
    assert!(t.hook().live_filters().is_empty());
    assert_eq!(t.hook().remove_calls(), 2);
    let st = t.stats();
    assert_eq!((st.expired, st.hook_removes), (2, 2));
    // An expired flow is placed afresh on its next packet.
    let s = t.steer(a, Some(3), &l, &q.heads(), 201);
    assert_eq!(s.action, SteerAction::Moved { from: None });
}

#[test]
fn sweep_keeps_an_offline_cpus_flow_while_it_still_drains() {
    let l = CpuLayout::uniform(4, 2).unwrap();
    let mut q = Queues::new(4);
    let mut t = RxFlowTable::with_hook(0, 16, RecordingHook::default()).unwrap();
    let s = t.steer(FLOW, Some(1), &l, &q.heads(), 0);
    t.note_enqueued(s.bucket, q.push(1));
    l.set_online(1, false);
    // Idle, CPU offline, but its worker has not handled the packet yet.
    assert_eq!(t.sweep(&l, &q.heads(), 500, 100, 16).expired, 0);
    assert_eq!(t.cpu_of(s.bucket), Some(1));
    q.drain(1);
    assert_eq!(t.sweep(&l, &q.heads(), 500, 100, 16).expired, 1);
    // A gone queue expires at once.
    let s = t.steer(FLOW, Some(2), &l, &q.heads(), 600);
    t.note_enqueued(s.bucket, q.push(2));
    q.deq[2] = None;
    assert_eq!(t.sweep(&l, &q.heads(), 700, 100, 16).expired, 1);
}

#[test]
fn sweep_is_incremental_and_steer_never_sweeps() {
    let l = CpuLayout::uniform(2, 2).unwrap();
    let q = Queues::new(2);
    let mut t = RxFlowTable::with_hook(0, 8, RecordingHook::default()).unwrap();
    for h in 1..=8u32 {
        t.steer(h, Some(0), &l, &q.heads(), 0);
    }
    // Long idle, but steering other packets never expires anything.
    t.steer(9, Some(1), &l, &q.heads(), 1_000);
    assert_eq!(t.stats().expired, 0);
    // Budget 3 per call: 8 buckets need 3 calls (bucket 1 was just used).
    let mut expired = 0;
    for _ in 0..3 {
        let r = t.sweep(&l, &q.heads(), 1_000, 100, 3);
        assert!(r.scanned <= 3);
        expired += r.expired;
    }
    assert_eq!(expired, 7);
    assert_eq!(t.cpu_of(1), Some(1));
}

#[test]
fn counters_readable_from_another_thread() {
    let l = CpuLayout::uniform(2, 2).unwrap();
    let q = Queues::new(2);
    let mut t = RxFlowTable::new(0, 8).unwrap();
    let handle = t.counters();
    t.steer(FLOW, Some(1), &l, &q.heads(), 0);
    let moves = std::thread::spawn(move || handle.snapshot().moves)
        .join()
        .unwrap();
    assert_eq!(moves, 1);
}

proptest! {
    /// Random traffic, consumer moves and partial drains: no packet of the
    /// flow is ever queued on a CPU while an earlier packet of it waits on
    /// another CPU (per-flow FIFO order survives every move).
    #[test]
    fn moves_never_reorder(ops in prop::collection::vec((0u8..4, 0usize..4), 1..300)) {
        let l = CpuLayout::uniform(4, 2).unwrap();
        let q = RefCell::new(Queues::new(4));
        let mut t = RxFlowTable::new(0, 16).unwrap();
        let mut desired = 0;
        // Positions (cpu, enqueue index) of this flow's packets not yet dequeued.
        let mut pending: Vec<(CpuId, u64)> = Vec::new();
        for (op, cpu) in ops {
            match op {
                0 => desired = cpu,
                1 => {
                    // Drain some of `cpu`'s queue.
                    let mut qs = q.borrow_mut();
                    let head = qs.deq[cpu].unwrap_or(0);
                    let new_head = (head + 1).min(qs.enq[cpu]);
                    qs.deq[cpu] = Some(new_head);
                    pending.retain(|&(c, pos)| c != cpu || pos > new_head);
                }
                _ => {
                    let heads = |c: CpuId| q.borrow().deq.get(c).copied().flatten();
                    let s = t.steer(FLOW, Some(desired), &l, &heads, 0);
                    let Some(target) = s.cpu else { continue };
                    prop_assert!(pending.iter().all(|&(c, _)| c == target),
                        "queued on {} while {:?} pending", target, pending);
                    let tail = q.borrow_mut().push(target);
                    t.note_enqueued(s.bucket, tail);
                    pending.push((target, tail));
                }
            }
        }
    }
}
