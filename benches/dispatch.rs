//! Dispatcher benchmarks:
//! - `steer/dispatch/batch/{1,8,64,256}`: cost per packet of classify + steer +
//!   enqueue to another CPU's ring, by batch size;
//! - `steer/dispatch/fast_path/{on,off}`: flows whose consumer is on the
//!   dispatcher's own CPU, inline vs through its own ring (and the ring
//!   enqueue counts, printed);
//! - `steer/dispatch/cold_frames/{prefetch,no_prefetch}`: 64 real UDP frames
//!   laid out as in a UMEM, their headers evicted from the caches before
//!   each batch (as after the kernel wrote them on another CPU), parsed,
//!   hashed and handled inline, with and without `FramePool::prefetch`;
//! - `steer/dispatch/ring_hop`: dispatcher thread -> ring -> worker thread;
//! - `steer/dispatch/churn/{always,llc}`: consumers hopping between CPUs of one
//!   LLC on a synthetic 2-LLC machine (`pack:1 l3:2 core:4 pu:1`), one record
//!   and one packet per event: time per event, and steering-hook calls and
//!   table updates per 100k events (printed, with the llc/always ratio; goal:
//!   at least 95% fewer, while a cross-LLC move is still followed).
//!
//! The classifier here reads a precomputed hash from the frame, so these
//! numbers are the dispatch machinery alone; `benches/flow.rs` measures
//! parse + hash.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use steer::core::cpu::{CpuLayout, CpuSet};
use steer::core::dispatch::{Dispatcher, FramePool, Pins, Shared};
use steer::core::flow::{flow_key, FlowClassifier, FlowHasher, KeyedHasher};
use steer::core::flow::{Classifier, FlowInfo, Malformed};
use steer::core::hook::{FilterId, FlowMove, HookError, SteerHook};
use steer::core::packet::build::FrameBuilder;
use steer::core::policy::Policy;
use steer::core::ring::{self, Consumer};
use steer::core::stats::Stats;
use steer::core::table::{DesiredCpuTable, RxFlowTable};

/// Frames are 4-byte flow hashes.
struct Pool(Vec<[u8; 4]>);
impl FramePool<u32> for Pool {
    #[inline]
    fn frame(&self, d: &u32) -> &[u8] {
        &self.0[*d as usize]
    }
    #[inline]
    fn release(&mut self, _d: u32) {}
}

struct HashInFrame;
impl Classifier for HashInFrame {
    #[inline]
    fn classify(&mut self, f: &[u8], _: Option<u32>) -> Result<Option<FlowInfo>, Malformed> {
        let hash = u32::from_le_bytes(f.try_into().map_err(|_| Malformed)?);
        Ok(Some(FlowInfo { hash, dst_port: 0 }))
    }
}

/// Counts calls, like a hardware ntuple backend would be charged.
#[derive(Default)]
struct CountingHook(u64);
impl SteerHook for CountingHook {
    fn steer(&mut self, _mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        self.0 += 1;
        Ok(None)
    }
    fn remove(&mut self, _rxq: u32, _bucket: usize, _filter: FilterId) {}
}

fn hash_of(flow: u32) -> u32 {
    flow.wrapping_mul(0x9E37_79B9) | 1
}

struct Rig<C = HashInFrame, P = Pool> {
    shared: Shared,
    dispatcher: Dispatcher<u32, C, CountingHook>,
    consumers: Vec<Consumer<u32>>,
    pool: P,
}

fn rig(layout: CpuLayout, policy: Policy, flows: u32, ring_cap: usize) -> Rig {
    let pool = Pool((0..flows).map(|f| hash_of(f).to_le_bytes()).collect());
    rig_with(layout, policy, HashInFrame, pool, ring_cap)
}

fn rig_with<C: Classifier, P>(
    layout: CpuLayout,
    policy: Policy,
    classifier: C,
    pool: P,
    ring_cap: usize,
) -> Rig<C, P> {
    let nr = layout.nr_cpus();
    let shared = Shared {
        desired: Arc::new(DesiredCpuTable::with_policy(65536, nr, policy).unwrap()),
        layout: Arc::new(layout),
        stats: Arc::new(Stats::new(nr)),
        pins: Pins::new(),
        switches: Default::default(),
        balance: Default::default(),
    };
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for _ in 0..nr {
        let (p, c) = ring::channel(ring_cap).unwrap();
        producers.push(Some(p));
        consumers.push(c);
    }
    let dispatcher = Dispatcher::new(
        0,
        0,
        classifier,
        RxFlowTable::with_hook(0, 65536, CountingHook::default()).unwrap(),
        producers,
        CpuSet::first(nr),
        shared.clone(),
    );
    Rig {
        shared,
        dispatcher,
        consumers,
        pool,
    }
}

/// A 2-CPU rig whose `flows` flows are all desired on `cpu`.
fn rig_with_flows_on(cpu: usize, flows: u32, ring_cap: usize) -> Rig {
    let r = rig(
        CpuLayout::uniform(2, 2).unwrap(),
        Policy::Always,
        flows,
        ring_cap,
    );
    let all = CpuSet::first(2);
    for f in 0..flows {
        r.shared
            .desired
            .record(hash_of(f), cpu, &all, &r.shared.layout)
            .unwrap();
    }
    r
}

fn drain(consumers: &mut [Consumer<u32>]) {
    for c in consumers {
        c.consume(usize::MAX, |d| {
            black_box(d);
        });
    }
}

fn batch_sizes(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/dispatch/batch");
    for batch in [1usize, 8, 64, 256] {
        let mut r = rig_with_flows_on(1, 1024, 4096);
        let descs: Vec<u32> = (0..batch as u32).map(|i| (i * 37) % 1024).collect();
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, _| {
            b.iter(|| {
                r.dispatcher
                    .dispatch(&descs, &mut r.pool, &mut |d: u32, _: &mut Pool| {
                        black_box(d);
                    });
                drain(&mut r.consumers);
            })
        });
    }
    g.finish();
}

fn fast_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/dispatch/fast_path");
    g.throughput(Throughput::Elements(64));
    let mut enqueues = Vec::new();
    for on in [true, false] {
        let mut r = rig_with_flows_on(0, 256, 4096);
        r.shared.switches.fast_path.store(on, Ordering::Relaxed);
        let descs: Vec<u32> = (0..64).map(|i| (i * 5) % 256).collect();
        let mut handled = 0u64;
        g.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter(|| {
                r.dispatcher
                    .dispatch(&descs, &mut r.pool, &mut |d: u32, _: &mut Pool| {
                        handled += u64::from(black_box(d) > 0);
                    });
                // The worker's own ring is drained by the same CPU, later.
                drain(&mut r.consumers);
            })
        });
        let t = r.shared.stats.snapshot().total;
        enqueues.push((
            on,
            t.queued_local + t.steered_out,
            t.queued_local + t.steered_out + t.fast_path,
        ));
    }
    g.finish();
    for (on, enq, total) in enqueues {
        println!(
            "steer/dispatch/fast_path/{}: ring enqueues per packet {:.3}",
            if on { "on" } else { "off" },
            enq as f64 / total.max(1) as f64
        );
    }
}

/// UMEM chunk size and the headroom in front of each received packet.
const CHUNK: usize = 2048;
const HEADROOM: usize = 256;

/// Real UDP/IPv4 frames laid out as in a UMEM, optionally prefetched.
struct UmemLike {
    buf: Vec<u8>,
    lens: Vec<usize>,
    prefetch: bool,
}

impl UmemLike {
    fn new(frames: &[Vec<u8>], prefetch: bool) -> Self {
        let mut buf = vec![0u8; frames.len() * CHUNK];
        for (i, f) in frames.iter().enumerate() {
            buf[i * CHUNK + HEADROOM..][..f.len()].copy_from_slice(f);
        }
        let lens = frames.iter().map(Vec::len).collect();
        Self {
            buf,
            lens,
            prefetch,
        }
    }

    /// Evicts every frame's first 128 bytes from the caches, as for frames
    /// the kernel has just written on another CPU.
    fn evict(&self) {
        for i in 0..self.lens.len() {
            for line in [0, 64] {
                let p = &self.buf[i * CHUNK + HEADROOM + line];
                // SAFETY: clflush of a valid address of our own buffer has
                // no effect beyond the caches; mfence orders it before the
                // timed reads.
                unsafe { std::arch::x86_64::_mm_clflush(p) };
            }
        }
        // SAFETY: a fence has no memory-safety preconditions.
        unsafe { std::arch::x86_64::_mm_mfence() };
    }
}

impl FramePool<u32> for UmemLike {
    #[inline]
    fn frame(&self, d: &u32) -> &[u8] {
        let i = *d as usize;
        &self.buf[i * CHUNK + HEADROOM..][..self.lens[i]]
    }
    #[inline]
    fn release(&mut self, _d: u32) {}
    #[inline]
    fn prefetch(&self, d: &u32) {
        if self.prefetch {
            let p = &self.buf[*d as usize * CHUNK + HEADROOM];
            // SAFETY: a prefetch reads nothing into the program and cannot
            // fault; SSE is in the x86_64 baseline.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    std::ptr::from_ref(p).cast(),
                )
            };
        }
    }
}

/// A batch of 64 frames the CPU has not seen (headers evicted before each
/// timed batch), parsed and hashed for real and handled inline: with and
/// without `FramePool::prefetch`.
fn cold_frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/dispatch/cold_frames");
    g.throughput(Throughput::Elements(64));
    let server = Ipv4Addr::new(192, 0, 2, 10).into();
    let frames: Vec<Vec<u8>> = (0..64u16)
        .map(|n| {
            FrameBuilder::udp(
                Ipv4Addr::new(10, 1, 0, n as u8).into(),
                server,
                30000 + n,
                53,
            )
            .payload(&[0xab; 64])
            .build()
        })
        .collect();
    let descs: Vec<u32> = (0..64).collect();
    for prefetch in [true, false] {
        let hasher = KeyedHasher::random();
        let mut r = rig_with(
            CpuLayout::uniform(2, 2).unwrap(),
            Policy::Always,
            FlowClassifier::new(hasher.clone()),
            UmemLike::new(&frames, prefetch),
            4096,
        );
        // Every flow consumed on the dispatcher's CPU: all inline.
        let all = CpuSet::first(2);
        for f in &frames {
            let hash = hasher.hash(&flow_key(f).unwrap().unwrap());
            r.shared
                .desired
                .record(hash, 0, &all, &r.shared.layout)
                .unwrap();
        }
        let name = if prefetch { "prefetch" } else { "no_prefetch" };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    r.pool.evict();
                    let t = Instant::now();
                    r.dispatcher
                        .dispatch(&descs, &mut r.pool, &mut |d: u32, _: &mut UmemLike| {
                            black_box(d);
                        });
                    timed += t.elapsed();
                }
                timed
            })
        });
    }
    g.finish();
}

fn ring_hop(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/dispatch/ring_hop");
    const N: u32 = 64 * 1024;
    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(10);
    g.bench_function("two_threads", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let mut r = rig_with_flows_on(1, 1024, 1024);
                let mut consumer = r.consumers.pop().unwrap();
                let start = std::time::Instant::now();
                let worker = std::thread::spawn(move || {
                    let mut got = 0u32;
                    while got < N {
                        got += consumer.consume(256, |d| {
                            black_box(d);
                        }) as u32;
                    }
                });
                let descs: Vec<u32> = (0..64).map(|i| (i * 37) % 1024).collect();
                let mut sent = 0;
                while sent < N {
                    let before = r.shared.stats.snapshot().total.steered_out;
                    r.dispatcher
                        .dispatch(&descs, &mut r.pool, &mut |d: u32, _: &mut Pool| {
                            black_box(d);
                        });
                    let after = r.shared.stats.snapshot().total.steered_out;
                    sent += (after - before) as u32;
                }
                worker.join().unwrap();
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// Event `i`: flow `i % 256`'s consumer, work-stolen tokio-style among the 4
/// CPUs of the flow's home LLC, records its CPU; then one packet of the flow.
fn churn_event(r: &mut Rig, all: &CpuSet, i: u32) {
    let flow = i % 256;
    let home = (flow as usize % 2) * 4;
    let cpu = home + (i as usize / 3 + flow as usize) % 4;
    r.shared
        .desired
        .record(hash_of(flow), cpu, all, &r.shared.layout)
        .unwrap();
    r.dispatcher
        .dispatch(&[flow], &mut r.pool, &mut |d: u32, _: &mut Pool| {
            black_box(d);
        });
}

fn churn(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/dispatch/churn");
    g.throughput(Throughput::Elements(1));
    let spec_layout = || CpuLayout::uniform(8, 4).unwrap(); // = pack:1 l3:2 core:4 pu:1
    let mut counts = Vec::new();
    for policy in [Policy::Always, Policy::LlcAffinity] {
        let mut r = rig(spec_layout(), policy, 256, 1 << 16);
        let all = CpuSet::first(8);
        let mut i = 0u32;
        let name = policy.name();
        g.bench_function(name, |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                churn_event(&mut r, &all, i);
                if i.is_multiple_of(64) {
                    drain(&mut r.consumers);
                }
            })
        });
        // Counted run of a fixed size, outside the timing.
        let mut r = rig(spec_layout(), policy, 256, 1 << 16);
        for i in 0..100_000u32 {
            churn_event(&mut r, &all, i);
            drain(&mut r.consumers);
        }
        counts.push((
            name,
            r.shared.desired.stats().updates(),
            r.dispatcher.rx_table().hook().0,
        ));
    }
    g.finish();
    for (name, updates, hooks) in &counts {
        println!("steer/dispatch/churn/{name}: per 100k events: {updates} table updates, {hooks} steering-hook calls");
    }
    if let [(_, ua, ha), (_, ul, hl)] = counts[..] {
        println!(
            "steer/dispatch/churn: llc/always: updates {:.4}, hook calls {:.4} ({:.1}% fewer hook calls)",
            ul as f64 / ua.max(1) as f64,
            hl as f64 / ha.max(1) as f64,
            100.0 * (1.0 - hl as f64 / ha.max(1) as f64)
        );
    }
}

criterion_group!(
    benches,
    batch_sizes,
    fast_path,
    cold_frames,
    ring_hop,
    churn
);
criterion_main!(benches);
