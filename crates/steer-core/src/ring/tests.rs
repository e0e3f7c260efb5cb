//! Unit tests of the ring's halves (single-threaded edge cases; the
//! two-thread stress and the model test live in `tests/ring_*.rs`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;

#[test]
fn capacity_must_be_a_power_of_two_in_range() {
    for bad in [0, 3, 6, 1000, MAX_CAPACITY + 1, MAX_CAPACITY * 2] {
        let err = channel::<u8>(bad).expect_err("bad capacity accepted");
        assert_eq!(err, CapacityError { requested: bad });
        assert!(err.to_string().contains(&bad.to_string()));
    }
    for good in [1, 2, 4, 1024] {
        let (tx, rx) = channel::<u8>(good).unwrap();
        assert_eq!(tx.capacity(), good);
        assert_eq!(rx.capacity(), good);
    }
}

#[test]
fn push_hands_the_item_back_when_full_and_pop_is_fifo() {
    let (mut tx, mut rx) = channel::<u32>(4).unwrap();
    for i in 0..4 {
        assert_eq!(tx.push(i), Ok(()));
    }
    assert!(tx.is_full());
    let err = tx.push(99).unwrap_err();
    assert_eq!(err, PushError::Full(99));
    assert_eq!(err.into_inner(), 99);
    assert_eq!(tx.enqueued(), 4, "a failed push must not count");
    for i in 0..4 {
        assert_eq!(rx.pop(), Some(i));
    }
    assert_eq!(rx.pop(), None);
    assert_eq!(rx.dequeued(), 4);
}

#[test]
fn capacity_one_alternates() {
    let (mut tx, mut rx) = channel::<u8>(1).unwrap();
    for i in 0..10 {
        tx.push(i).unwrap();
        assert_eq!(tx.push(i), Err(PushError::Full(i)));
        assert_eq!(rx.pop(), Some(i));
        assert_eq!(rx.pop(), None);
    }
}

#[test]
fn batches_wrap_around_the_end() {
    let (mut tx, mut rx) = channel::<u32>(8).unwrap();
    let mut buf = [0u32; 8];
    // Move the counters to 5 so the next batch wraps.
    assert_eq!(tx.push_batch(&[0, 1, 2, 3, 4]), 5);
    assert_eq!(rx.pop_batch(&mut buf), 5);
    assert_eq!(&buf[..5], &[0, 1, 2, 3, 4]);
    let items: Vec<u32> = (10..20).collect();
    assert_eq!(
        tx.push_batch(&items),
        8,
        "takes what fits, caller keeps the rest"
    );
    assert_eq!(tx.push_batch(&items[8..]), 0);
    assert_eq!(rx.pop_batch(&mut buf[..3]), 3);
    assert_eq!(&buf[..3], &[10, 11, 12]);
    assert_eq!(tx.push_batch(&items[8..]), 2);
    assert_eq!(rx.pop_batch(&mut buf), 7);
    assert_eq!(&buf[..7], &[13, 14, 15, 16, 17, 18, 19]);
    assert_eq!(rx.pop_batch(&mut buf), 0);
    assert_eq!((tx.enqueued(), rx.dequeued()), (15, 15));
}

#[test]
fn counters_and_lengths_agree_on_both_sides() {
    let (mut tx, mut rx) = channel::<u64>(16).unwrap();
    assert_eq!((tx.free_len(), rx.len(), rx.is_empty()), (16, 0, true));
    tx.push_batch(&[1; 10]);
    let mark = tx.enqueued();
    assert_eq!(mark, 10);
    assert_eq!(rx.enqueued(), 10);
    assert_eq!((tx.free_len(), rx.len()), (6, 10));
    assert!(!tx.has_dequeued(mark));
    assert_eq!(rx.consume(9, drop), 9);
    assert_eq!((tx.dequeued(), rx.dequeued()), (9, 9));
    assert!(!tx.has_dequeued(mark));
    assert!(tx.has_dequeued(9));
    assert_eq!(rx.pop(), Some(1));
    assert!(tx.has_dequeued(mark));
    assert_eq!((tx.free_len(), rx.len(), rx.is_empty()), (16, 0, true));
}

#[test]
fn consume_publishes_the_head_only_after_the_handler_returns() {
    let (mut tx, mut rx) = channel::<u32>(8).unwrap();
    tx.push_batch(&[1, 2, 3]);
    let mut heads = Vec::new();
    let n = rx.consume(8, |_| heads.push(tx.dequeued()));
    assert_eq!(n, 3);
    assert_eq!(heads, [0, 0, 0], "head must not move mid-batch");
    assert_eq!(tx.dequeued(), 3);
    assert_eq!(rx.consume(0, |_| unreachable!()), 0);
    assert_eq!(rx.consume(8, |_| unreachable!()), 0);
}

/// Counts its drops, to check that nothing leaks or drops twice.
#[derive(Debug)]
struct Tracked(u32, Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn items_left_in_the_ring_are_dropped_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = channel::<Tracked>(4).unwrap();
    for i in 0..4 {
        tx.push(Tracked(i, drops.clone())).unwrap();
    }
    let back = tx.push(Tracked(9, drops.clone())).unwrap_err().into_inner();
    assert_eq!(back.0, 9);
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let first = rx.pop().unwrap();
    assert_eq!(first.0, 0);
    drop(first);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    // Wrap so the leftovers straddle the end of the buffer.
    tx.push(Tracked(4, drops.clone())).unwrap();
    drop(tx);
    assert!(rx.is_abandoned());
    assert_eq!(rx.pop().map(|t| t.0), Some(1));
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    drop(rx); // holds 2, 3, 4
    assert_eq!(drops.load(Ordering::SeqCst), 6);
}

#[test]
fn a_panicking_handler_loses_nothing_and_drops_nothing_twice() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = channel::<Tracked>(8).unwrap();
    for i in 0..5 {
        tx.push(Tracked(i, drops.clone())).unwrap();
    }
    let mut seen = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        rx.consume(8, |t| {
            seen.push(t.0);
            assert_ne!(t.0, 2, "handler fails on item 2");
        })
    }));
    assert!(result.is_err());
    assert_eq!(seen, [0, 1, 2]);
    assert_eq!(drops.load(Ordering::SeqCst), 3, "items 0..=2 dropped once");
    assert_eq!(rx.dequeued(), 3);
    assert_eq!(tx.dequeued(), 3);
    let rest: Vec<u32> = std::iter::from_fn(|| rx.pop()).map(|t| t.0).collect();
    assert_eq!(rest, [3, 4]);
    drop((tx, rx));
    assert_eq!(drops.load(Ordering::SeqCst), 5);
}

#[test]
fn halves_are_send_and_report_abandonment() {
    fn assert_send<S: Send>(_: &S) {}
    let (tx, rx) = channel::<u64>(2).unwrap();
    assert_send(&tx);
    assert_send(&rx);
    assert!(!tx.is_abandoned() && !rx.is_abandoned());
    drop(rx);
    assert!(tx.is_abandoned());
}

#[test]
fn errors_display_and_debug_without_t_debug() {
    struct Opaque;
    let err = PushError::Full(Opaque);
    assert_eq!(err.to_string(), "ring is full");
    assert_eq!(format!("{err:?}"), "Full(..)");
    let (tx, rx) = channel::<Opaque>(2).unwrap();
    assert!(format!("{tx:?}").contains("capacity: 2"));
    assert!(format!("{rx:?}").contains("dequeued: 0"));
}

#[test]
fn zero_sized_items_are_counted() {
    let (mut tx, mut rx) = channel::<()>(4).unwrap();
    assert_eq!(tx.push_batch(&[(); 6]), 4);
    let mut buf = [(); 3];
    assert_eq!(rx.pop_batch(&mut buf), 3);
    assert_eq!(rx.len(), 1);
}

#[test]
fn a_buffer_too_large_to_lay_out_is_a_capacity_error() {
    let err = channel::<[u8; 1 << 40]>(1 << 31).expect_err("2^71 bytes");
    assert_eq!(err.requested, 1 << 31);
}

#[test]
fn reclaimed_items_come_back_in_order_once_and_are_not_dropped_again() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = channel::<Tracked>(4).unwrap();
    for i in 0..3 {
        tx.push(Tracked(i, drops.clone())).unwrap();
    }
    assert_eq!(rx.pop().map(|t| t.0), Some(0));
    tx.push(Tracked(3, drops.clone())).unwrap();
    tx.push(Tracked(4, drops.clone())).unwrap(); // wraps
    let mut back = Vec::new();
    assert_eq!(tx.reclaim_abandoned(|t| back.push(t)), 0, "consumer alive");
    drop(rx);
    assert_eq!(tx.reclaim_abandoned(|t| back.push(t)), 4);
    assert_eq!(back.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(tx.reclaim_abandoned(|t| back.push(t)), 0, "nothing twice");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 5);
    drop(tx); // the ring is empty: no further drop
    assert_eq!(drops.load(Ordering::SeqCst), 5);
}

#[test]
fn unpublished_items_stay_queued_for_the_producer_until_publish() {
    let (mut tx, mut rx) = channel::<u32>(4).unwrap();
    assert_eq!(tx.push_batch(&[1, 2, 3, 4]), 4);
    let mark = tx.enqueued();
    let mut seen = Vec::new();
    assert_eq!(rx.consume_unpublished(3, |x| seen.push(x)), 3);
    assert_eq!(seen, [1, 2, 3]);
    // Taken on the consumer's side...
    assert_eq!((rx.dequeued(), rx.len()), (3, 1));
    // ...but the producer sees them queued: no slot free, nothing handled.
    assert_eq!(tx.dequeued(), 0);
    assert!(tx.is_full() && !tx.has_dequeued(3));
    assert_eq!(rx.consume_unpublished(8, |x| seen.push(x)), 1);
    rx.publish();
    assert!(tx.has_dequeued(mark));
    assert_eq!(tx.free_len(), 4);
    // Publishing again with nothing new taken is a no-op.
    rx.publish();
    assert_eq!(tx.dequeued(), 4);
    // `pop` publishes everything taken before it too.
    tx.push_batch(&[5, 6]);
    rx.consume_unpublished(1, |x| seen.push(x));
    assert_eq!(tx.dequeued(), 4);
    assert_eq!(rx.pop(), Some(6));
    assert_eq!(tx.dequeued(), 6);
}

#[test]
fn a_panic_in_consume_unpublished_publishes_nothing_and_loses_nothing() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct Tracked(u32, Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (mut tx, mut rx) = channel::<Tracked>(8).unwrap();
    for i in 0..5 {
        tx.push(Tracked(i, drops.clone())).unwrap();
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        rx.consume_unpublished(8, |t| assert_ne!(t.0, 2, "handler fails on item 2"))
    }));
    assert!(result.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 3, "items 0..=2 dropped once");
    assert_eq!(rx.dequeued(), 3);
    assert_eq!(
        tx.dequeued(),
        0,
        "not published: still queued for the producer"
    );
    // The consumer goes away (its worker died): it publishes what it took,
    // so reclaiming returns only the items it never read.
    drop(rx);
    let mut back = Vec::new();
    assert_eq!(tx.reclaim_abandoned(|t| back.push(t.0)), 2);
    assert_eq!(back, [3, 4]);
    drop(tx);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        5,
        "each item dropped exactly once"
    );
}
