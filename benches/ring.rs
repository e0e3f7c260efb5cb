//! The ring hop: moving frame descriptors from a producer thread to a
//! consumer thread through steer's SPSC ring, against crossbeam's
//! `ArrayQueue` (MPMC, one CAS per item) and the `rtrb` crate (SPSC, chunk
//! API for batches), at the same batch sizes and capacity.
//!
//! Each measured iteration moves `ITEMS` 16-byte descriptors (the size of
//! AF_XDP's `xdp_desc`); the consumer checks the count and sums the
//! addresses. The clock starts once the consumer thread is running and stops
//! when it has taken the last item, so thread start-up is not measured. A
//! side that finds the queue full or empty backs off the same way for all
//! three queues (spin, then yield). The threads are not pinned: on a shared
//! machine a pinned side is hostage to whatever else runs on its CPU. Many
//! short samples of equal size (flat sampling) let the median shed the ones
//! hit by preemption.
//!
//! Goal: at least 2x ArrayQueue's throughput, within 1.5x of rtrb.

use std::hint::{black_box, spin_loop};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use crossbeam::queue::ArrayQueue;
use crossbeam::utils::Backoff;

/// Descriptors moved per iteration.
const ITEMS: u64 = 1 << 14;
/// Slots in every ring.
const CAPACITY: usize = 1024;
/// Batch sizes compared.
const BATCHES: [usize; 3] = [1, 8, 64];

/// A frame descriptor, laid out like AF_XDP's `struct xdp_desc`.
#[derive(Clone, Copy, Default, Debug)]
#[allow(dead_code)] // `len`/`options` are carried, not read.
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

fn desc(i: u64) -> Desc {
    Desc {
        addr: i,
        len: 64,
        options: 0,
    }
}

/// Runs `iters` iterations: `produce` on this thread, `consume` on a new one
/// (which must return after `n` items and return its address sum), timed
/// from the consumer being ready to it being done.
fn timed<P, C>(iters: u64, produce: P, consume: C) -> Duration
where
    P: FnOnce(u64),
    C: FnOnce(u64) -> u64 + Send + 'static,
{
    let n = iters * ITEMS;
    let ready = Arc::new(AtomicBool::new(false));
    let go = ready.clone();
    let consumer = thread::spawn(move || {
        go.store(true, Ordering::Release);
        let sum = consume(n);
        (Instant::now(), sum)
    });
    while !ready.load(Ordering::Acquire) {
        spin_loop();
    }
    let start = Instant::now();
    produce(n);
    let (end, sum) = consumer.join().expect("consumer panicked");
    assert_eq!(sum, n * (n - 1) / 2, "lost or duplicated items");
    end - start
}

/// Fills `batch` with descriptors `next..next + len` and returns it.
fn fill(batch: &mut [Desc], next: u64) -> &[Desc] {
    for (i, d) in batch.iter_mut().enumerate() {
        *d = desc(next + i as u64);
    }
    batch
}

/// The producer side every queue shares: descriptors `0..n` in batches of
/// `batch`, each offered to `try_send` (which takes a prefix of the slice
/// and says how many; 0 = full) until all are taken, backing off when full.
fn send_all(n: u64, batch: usize, mut try_send: impl FnMut(&[Desc]) -> usize) {
    let mut buf = vec![Desc::default(); batch];
    let backoff = Backoff::new();
    let mut next = 0;
    while next < n {
        let len = batch.min((n - next) as usize);
        let items = fill(&mut buf[..len], next);
        let mut sent = 0;
        while sent < len {
            let k = try_send(&items[sent..]);
            sent += k;
            if k == 0 {
                backoff.snooze();
            } else {
                backoff.reset();
            }
        }
        next += len as u64;
    }
}

/// The consumer side every queue shares: `try_recv` moves up to `buf.len()`
/// descriptors to the front of `buf` and says how many (0 = empty); returns
/// the sum of the `n` addresses received.
fn recv_all(n: u64, batch: usize, mut try_recv: impl FnMut(&mut [Desc]) -> usize) -> u64 {
    let mut buf = vec![Desc::default(); batch];
    let backoff = Backoff::new();
    let (mut got, mut sum) = (0, 0u64);
    while got < n {
        let k = try_recv(&mut buf);
        sum += buf[..k].iter().map(|d| black_box(d).addr).sum::<u64>();
        got += k as u64;
        if k == 0 {
            backoff.snooze();
        } else {
            backoff.reset();
        }
    }
    sum
}

fn steer_ring(iters: u64, batch: usize) -> Duration {
    let (mut tx, mut rx) = steer::core::ring::channel::<Desc>(CAPACITY).expect("capacity");
    timed(
        iters,
        move |n| {
            send_all(n, batch, |items| {
                if items.len() == 1 {
                    usize::from(tx.push(items[0]).is_ok())
                } else {
                    tx.push_batch(items)
                }
            })
        },
        move |n| {
            recv_all(n, batch, |buf| {
                if buf.len() == 1 {
                    rx.pop().map_or(0, |d| {
                        buf[0] = d;
                        1
                    })
                } else {
                    rx.pop_batch(buf)
                }
            })
        },
    )
}

fn rtrb_ring(iters: u64, batch: usize) -> Duration {
    let (mut tx, mut rx) = rtrb::RingBuffer::<Desc>::new(CAPACITY);
    timed(
        iters,
        move |n| {
            send_all(n, batch, |items| {
                if items.len() == 1 {
                    return usize::from(tx.push(items[0]).is_ok());
                }
                // Cached count first, fresh only if short (as rtrb's own
                // `push_partial_slice` does).
                let want = items.len();
                let k = if tx.cached_slots() < want {
                    want.min(tx.slots())
                } else {
                    want
                };
                if k == 0 {
                    return 0;
                }
                let chunk = tx.write_chunk_uninit(k).expect("slots checked");
                chunk.fill_from_iter(items[..k].iter().copied())
            })
        },
        move |n| {
            recv_all(n, batch, |buf| {
                if buf.len() == 1 {
                    return rx.pop().map_or(0, |d| {
                        buf[0] = d;
                        1
                    });
                }
                let k = if rx.cached_slots() < buf.len() {
                    buf.len().min(rx.slots())
                } else {
                    buf.len()
                };
                if k > 0 {
                    let chunk = rx.read_chunk(k).expect("slots checked");
                    let (a, b) = chunk.as_slices();
                    buf[..a.len()].copy_from_slice(a);
                    buf[a.len()..k].copy_from_slice(b);
                    chunk.commit_all();
                }
                k
            })
        },
    )
}

fn array_queue(iters: u64, batch: usize) -> Duration {
    let q = Arc::new(ArrayQueue::<Desc>::new(CAPACITY));
    let rq = q.clone();
    timed(
        iters,
        move |n| {
            // One CAS per item: take items until the queue is full.
            send_all(n, batch, |items| {
                items.iter().take_while(|&&d| q.push(d).is_ok()).count()
            })
        },
        move |n| {
            recv_all(n, batch, |buf| {
                let mut k = 0;
                while k < buf.len() {
                    match rq.pop() {
                        Some(d) => {
                            buf[k] = d;
                            k += 1;
                        }
                        None => break,
                    }
                }
                k
            })
        },
    )
}

/// One thread pushes a batch and pops it back: the per-item instruction
/// cost of each queue without cross-core traffic or scheduling noise (the
/// two-thread numbers on a loaded 2-core machine are mostly scheduling).
fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/ring/one_thread");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for batch in BATCHES {
        g.throughput(Throughput::Elements(batch as u64));
        let items: Vec<Desc> = (0..batch as u64).map(desc).collect();
        let mut buf = vec![Desc::default(); batch];

        let (mut tx, mut rx) = steer::core::ring::channel::<Desc>(CAPACITY).expect("capacity");
        g.bench_function(BenchmarkId::new("steer", batch), |b| {
            b.iter(|| {
                if batch == 1 {
                    tx.push(black_box(items[0])).expect("room");
                    black_box(rx.pop().expect("item"));
                } else {
                    assert_eq!(tx.push_batch(black_box(&items)), batch);
                    assert_eq!(rx.pop_batch(&mut buf), batch);
                    black_box(&buf);
                }
            })
        });

        // The worker's draining call: handler per item, one head publish.
        let (mut tx, mut rx) = steer::core::ring::channel::<Desc>(CAPACITY).expect("capacity");
        g.bench_function(BenchmarkId::new("steer_consume", batch), |b| {
            b.iter(|| {
                assert_eq!(tx.push_batch(black_box(&items)), batch);
                let mut sum = 0;
                assert_eq!(rx.consume(batch, |d| sum += d.addr), batch);
                black_box(sum);
            })
        });

        let (mut tx, mut rx) = rtrb::RingBuffer::<Desc>::new(CAPACITY);
        g.bench_function(BenchmarkId::new("rtrb", batch), |b| {
            b.iter(|| {
                if batch == 1 {
                    tx.push(black_box(items[0])).expect("room");
                    black_box(rx.pop().expect("item"));
                } else {
                    let chunk = tx.write_chunk_uninit(batch).expect("room");
                    chunk.fill_from_iter(black_box(&items).iter().copied());
                    let chunk = rx.read_chunk(batch).expect("items");
                    let (a, b) = chunk.as_slices();
                    buf[..a.len()].copy_from_slice(a);
                    buf[a.len()..].copy_from_slice(b);
                    chunk.commit_all();
                    black_box(&buf);
                }
            })
        });

        let q = ArrayQueue::<Desc>::new(CAPACITY);
        g.bench_function(BenchmarkId::new("array_queue", batch), |b| {
            b.iter(|| {
                for &d in black_box(&items).iter() {
                    q.push(d).expect("room");
                }
                for slot in buf.iter_mut() {
                    *slot = q.pop().expect("item");
                }
                black_box(&buf);
            })
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/ring/spsc");
    g.throughput(Throughput::Elements(ITEMS));
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(200);
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for batch in BATCHES {
        g.bench_with_input(BenchmarkId::new("steer", batch), &batch, |b, &batch| {
            b.iter_custom(|iters| steer_ring(iters, batch))
        });
        g.bench_with_input(BenchmarkId::new("rtrb", batch), &batch, |b, &batch| {
            b.iter_custom(|iters| rtrb_ring(iters, batch))
        });
        g.bench_with_input(
            BenchmarkId::new("array_queue", batch),
            &batch,
            |b, &batch| b.iter_custom(|iters| array_queue(iters, batch)),
        );
    }
    g.finish();
}

criterion_group!(benches, bench, one_thread);
criterion_main!(benches);
