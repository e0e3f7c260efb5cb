//! loom model checks of the ring (run by `ci/loom.sh`): every
//! interleaving of the two halves' atomics, up to `LOOM_MAX_PREEMPTIONS`,
//! with loom's `UnsafeCell` flagging any slot access not ordered by the
//! head/tail acquire/release pairs. Tiny capacities (1, 2) and a few items
//! make the full and empty boundaries, and the wrap, happen in every model.

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::thread;

use super::sync::{Arc, Ordering};
use super::*;

/// Pushes `items` one by one, yielding while the ring is full.
fn push_all(tx: &mut Producer<u32>, items: &[u32]) {
    for &item in items {
        let mut item = item;
        while let Err(PushError::Full(back)) = tx.push(item) {
            item = back;
            thread::yield_now();
        }
    }
}

/// Pushes `items` in batches, calling `check` with the producer and how
/// many each batch took, yielding after a batch that took none.
fn push_batches(
    tx: &mut Producer<u32>,
    items: &[u32],
    mut check: impl FnMut(&Producer<u32>, usize),
) {
    let mut sent = 0;
    while sent < items.len() {
        let n = tx.push_batch(&items[sent..]);
        sent += n;
        check(tx, n);
        if n == 0 {
            thread::yield_now();
        }
    }
}

/// [`push_all`], then waits (yielding) until the consumer's head has
/// passed them.
fn push_all_until_dequeued(tx: &mut Producer<u32>, items: &[u32]) {
    push_all(tx, items);
    let mark = tx.enqueued();
    while !tx.has_dequeued(mark) {
        thread::yield_now();
    }
}

/// Calls `take` (which returns how many items it took) until `total`
/// items are taken, yielding after each call that took none.
fn until_taken(total: usize, mut take: impl FnMut() -> usize) {
    let mut left = total;
    while left > 0 {
        let n = take();
        left -= n;
        if n == 0 {
            thread::yield_now();
        }
    }
}

#[test]
fn single_push_pop_across_full_and_empty() {
    loom::model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).unwrap();
        let producer = thread::spawn(move || {
            push_all(&mut tx, &[1, 2, 3]);
            assert_eq!(tx.enqueued(), 3);
            tx
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match rx.pop() {
                Some(item) => got.push(item),
                None => thread::yield_now(),
            }
        }
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(rx.pop(), None);
        let tx = producer.join().unwrap();
        assert_eq!((tx.dequeued(), rx.enqueued()), (3, 3));
        assert_eq!((tx.free_len(), rx.len()), (2, 0));
    });
}

#[test]
fn batches_wrap_and_keep_order() {
    loom::model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).unwrap();
        let producer = thread::spawn(move || {
            push_batches(&mut tx, &[1, 2, 3], |_, n| assert!(n <= 2));
        });
        let mut got = Vec::new();
        let mut buf = [0u32; 2];
        while got.len() < 3 {
            let n = rx.pop_batch(&mut buf);
            got.extend_from_slice(&buf[..n]);
            if n == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, [1, 2, 3]);
        producer.join().unwrap();
    });
}

/// One model of `has_dequeued`'s promise: the consumer takes the items
/// 10 and 20 with `take` (which adds what it took to the cell and returns
/// how many), the producer waits until the head passed them and must then
/// read the sum the consumer wrote.
fn dequeued_means_written(take: fn(&mut Consumer<u32>, &UnsafeCell<u32>) -> usize) {
    let (mut tx, mut rx) = channel::<u32>(2).unwrap();
    let written = Arc::new(UnsafeCell::new(0u32));
    let seen = written.clone();
    let consumer = thread::spawn(move || until_taken(2, || take(&mut rx, &seen)));
    push_all_until_dequeued(&mut tx, &[10, 20]);
    // SAFETY: the consumer wrote before publishing the head we observed
    // with Acquire; it writes nothing more.
    let sum = written.with(|p| unsafe { *p });
    assert_eq!(sum, 30);
    consumer.join().unwrap();
}

#[test]
fn has_dequeued_means_the_handler_ran() {
    // Written by the consumer's handler, read by the producer once the head
    // passed the mark: a race here means the counter read is too weak to
    // carry `last_qtail`.
    loom::model(|| {
        dequeued_means_written(|rx, seen| {
            rx.consume(2, |item| {
                // SAFETY: only this handler writes, and the producer reads
                // only after `has_dequeued` proved we are done.
                seen.with_mut(|p| unsafe { *p += item });
            })
        })
    });
}

#[test]
fn has_dequeued_after_publish_means_the_work_after_the_handler_ran_too() {
    // Written after the handler returned (a staged reply sent), before
    // `publish`: the producer must see it once the head passed the mark.
    loom::model(|| {
        dequeued_means_written(|rx, seen| {
            let mut staged = 0;
            let n = rx.consume_unpublished(2, |item| staged += item);
            // SAFETY: only this thread writes, and the producer reads only
            // after `has_dequeued` proved we published past it.
            seen.with_mut(|p| unsafe { *p += staged });
            rx.publish();
            n
        })
    });
}

#[test]
fn has_dequeued_after_publish_to_means_the_work_before_the_position_ran() {
    // The head is published in two steps, to a position recorded after the
    // first item and then past both, each after the work on the items
    // before it (a device completing their replies): once the producer sees
    // the head pass an item, it must see that item's work, and the slot
    // freed first may be reused while the second item is still held.
    loom::model(|| {
        dequeued_means_written(|rx, seen| {
            let mut taken = Vec::new();
            let n = rx.consume_unpublished(2, |item| taken.push(item));
            let start = rx.dequeued() - n as u64;
            for (i, item) in taken.into_iter().enumerate() {
                // SAFETY: only this thread writes, and the producer reads
                // only after `has_dequeued` proved we published past it.
                seen.with_mut(|p| unsafe { *p += item });
                rx.publish_to(start + i as u64 + 1);
            }
            n
        })
    });
}

#[test]
fn publish_to_frees_only_the_slots_before_the_position() {
    loom::model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).unwrap();
        push_all(&mut tx, &[1, 2]);
        let mut got = Vec::new();
        assert_eq!(rx.consume_unpublished(2, |x| got.push(x)), 2);
        let producer = thread::spawn(move || {
            // Once one slot is free, it is the first item's: 3 goes there
            // while 2 is still held.
            push_all(&mut tx, &[3]);
            tx
        });
        rx.publish_to(1);
        let tx = producer.join().unwrap();
        assert_eq!(tx.free_len(), 0);
        assert!(tx.has_dequeued(1) && !tx.has_dequeued(2));
        rx.publish();
        let mut rest = Vec::new();
        while rest.is_empty() {
            rx.consume(2, |x| rest.push(x));
        }
        assert_eq!((got, rest), (vec![1, 2], vec![3]));
    });
}

/// Counts drops in a loom atomic.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn nothing_leaks_when_the_consumer_leaves_early() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = channel::<Tracked>(1).unwrap();
        let counter = drops.clone();
        let producer = thread::spawn(move || {
            let mut refused = 0;
            for _ in 0..2 {
                if let Err(PushError::Full(item)) = tx.push(Tracked(counter.clone())) {
                    refused += 1;
                    drop(item);
                }
            }
            refused
        });
        let popped = usize::from(rx.pop().is_some());
        drop(rx);
        let refused = producer.join().unwrap();
        // Every item was handed back, popped, or dropped with the ring.
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        assert!(popped + refused <= 2);
    });
}

#[test]
fn counter_reads_stay_within_bounds_from_both_sides() {
    loom::model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).unwrap();
        let producer = thread::spawn(move || {
            push_batches(&mut tx, &[1, 2, 3], |tx, _| {
                // Fresh reads of the consumer's head: never ahead of us,
                // never more free slots than the capacity.
                let head = tx.dequeued();
                assert!(head <= tx.enqueued());
                assert!(tx.free_len() <= 2);
                assert!(tx.has_dequeued(head));
            });
        });
        let mut got = 0u64;
        let mut last_tail = 0;
        while got < 3 {
            let tail = rx.enqueued();
            assert!(tail >= last_tail, "tail went backwards");
            assert!(tail >= rx.dequeued() && tail - rx.dequeued() <= 2);
            last_tail = tail;
            let len = rx.len();
            let n = rx.consume(1, |item| assert_eq!(u64::from(item), got + 1));
            if len > 0 {
                assert_eq!(n, 1, "an item seen by len() must be consumable");
            }
            got += n as u64;
            if n == 0 {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!((rx.enqueued(), rx.dequeued(), rx.len()), (3, 3, 0));
    });
}

/// A consumer that pops some items and then goes away (its worker died)
/// while the producer keeps pushing; the producer then reclaims the rest.
/// Every item ends exactly once on one side, in order, and loom checks the
/// reclaim's slot reads are ordered after the consumer's last access.
#[test]
fn reclaim_after_the_consumer_is_dropped_sees_each_item_once() {
    loom::model(|| {
        let (mut tx, mut rx) = channel::<u32>(2).unwrap();
        let consumer = thread::spawn(move || {
            let mut got = Vec::new();
            if let Some(x) = rx.pop() {
                got.push(x);
            }
            drop(rx);
            got
        });
        let mut pushed = Vec::new();
        for item in [1, 2, 3] {
            if tx.push(item).is_ok() {
                pushed.push(item);
            }
        }
        // Reclaim as soon as the consumer is gone, before joining it, so
        // only the reclaim's own acquire orders it after the consumer.
        let mut reclaimed = Vec::new();
        while tx.reclaim_abandoned(|x| reclaimed.push(x)) == 0 && !tx.is_abandoned() {
            thread::yield_now();
        }
        let popped = consumer.join().unwrap();
        let mut all = popped.clone();
        all.extend(&reclaimed);
        assert_eq!(all, pushed, "popped {popped:?} + reclaimed {reclaimed:?}");
        assert_eq!(tx.reclaim_abandoned(|_| unreachable!()), 0);
    });
}
