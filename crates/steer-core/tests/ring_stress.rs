//! Two-thread stress test of the ring: a producer and a consumer on their
//! own threads move a counted sequence through a small ring with random
//! batch sizes; the consumer checks that every item arrives once, in order,
//! and both sides check the final counters.
#![cfg(not(loom))]

use std::thread;

use steer_core::ring::{channel, PushError};

/// Items per run: fewer in debug builds, which are ~30x slower.
const ITEMS: u64 = if cfg!(debug_assertions) {
    200_000
} else {
    2_000_000
};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// Runs one producer/consumer pair over a ring of `cap` slots.
fn run(cap: usize, seed: u64) {
    let (mut tx, mut rx) = channel::<u64>(cap).unwrap();
    let producer = thread::spawn(move || {
        let mut rng = Rng(seed);
        let mut next = 0u64;
        let mut batch = Vec::with_capacity(64);
        while next < ITEMS {
            match rng.below(3) {
                // Single push, retried with the handed-back item.
                0 => match tx.push(next) {
                    Ok(()) => next += 1,
                    Err(PushError::Full(item)) => {
                        assert_eq!(item, next);
                        thread::yield_now();
                    }
                },
                // Batch: the caller keeps (and resends) what did not fit.
                _ => {
                    let len = (1 + rng.below(64)).min((ITEMS - next) as usize);
                    batch.clear();
                    batch.extend(next..next + len as u64);
                    let n = tx.push_batch(&batch);
                    next += n as u64;
                    if n == 0 {
                        thread::yield_now();
                    }
                }
            }
        }
        tx
    });

    let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut expected = 0u64;
    let mut buf = [0u64; 64];
    while expected < ITEMS {
        let got = match rng.below(3) {
            0 => match rx.pop() {
                Some(item) => {
                    assert_eq!(item, expected, "out of order or duplicated");
                    expected += 1;
                    1
                }
                None => 0,
            },
            1 => {
                let n = rx.pop_batch(&mut buf[..1 + rng.below(64)]);
                for &item in &buf[..n] {
                    assert_eq!(item, expected, "out of order or duplicated");
                    expected += 1;
                }
                n
            }
            _ => rx.consume(1 + rng.below(64), |item| {
                assert_eq!(item, expected, "out of order or duplicated");
                expected += 1;
            }),
        };
        assert!(rx.len() <= cap);
        if got == 0 {
            thread::yield_now();
        }
    }
    let tx = producer.join().unwrap();
    assert_eq!(rx.pop(), None, "more items than sent");
    assert_eq!((tx.enqueued(), tx.dequeued()), (ITEMS, ITEMS));
    assert_eq!((rx.enqueued(), rx.dequeued()), (ITEMS, ITEMS));
    assert!(!rx.is_abandoned());
    drop(tx);
    assert!(rx.is_abandoned());
}

#[test]
fn two_threads_keep_order_and_count_tiny_ring() {
    run(2, 1);
}

#[test]
fn two_threads_keep_order_and_count_batch_sized_ring() {
    run(64, 2);
}

#[test]
fn two_threads_keep_order_and_count_large_ring() {
    run(4096, 3);
}

/// Producer-side `has_dequeued` against a consumer that records, before
/// publishing, how far it has handled: a `true` answer must never be ahead
/// of the handler.
#[test]
fn has_dequeued_never_runs_ahead_of_the_handler() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let handled = Arc::new(AtomicU64::new(0));
    let (mut tx, mut rx) = channel::<u64>(16).unwrap();
    let seen = handled.clone();
    let consumer = thread::spawn(move || {
        let mut done = 0;
        while done < ITEMS / 4 {
            let n = rx.consume(8, |item| {
                seen.store(item + 1, Ordering::Relaxed);
            });
            done += n as u64;
            if n == 0 {
                thread::yield_now();
            }
        }
    });
    let mut next = 0u64;
    while next < ITEMS / 4 {
        if tx.push(next).is_ok() {
            next += 1;
        }
        let head = tx.dequeued();
        // The handler's Relaxed store is ordered before the Release of the
        // head, which our Acquire load saw.
        assert!(handled.load(Ordering::Relaxed) >= head);
        assert!(tx.has_dequeued(head));
    }
    consumer.join().unwrap();
    assert!(tx.has_dequeued(ITEMS / 4));
}
