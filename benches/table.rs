//! Flow-table costs.
//!
//! - `steer/flow_table/false_sharing/{split,packed}`: dispatcher lookups while
//!   a second thread hammers the write-heavy record counters. `split` keeps
//!   the read-mostly header (masks, entry pointer) apart from the counters on
//!   their own `CachePadded` line, as `DesiredCpuTable` does; `packed` puts
//!   them in the header's cache line. Same entry codec and lookup code for
//!   both; only the layout differs. `desired_table_llc_churn`: the real
//!   `DesiredCpuTable` while the second thread records intra-LLC churn
//!   (suppressed records) under `LlcAffinity`. Reader and hammer are pinned
//!   to the first two allowed CPUs, and only batches during which the
//!   hammer made progress and the reader was not preempted are timed (the
//!   machine this runs on is small and shared).
//! - `steer/flow_table/record/{always,llc}/{same_cpu,intra_llc,cross_llc}`:
//!   `DesiredCpuTable::record` when the consumer stays put, churns between
//!   two CPUs of one LLC, or between two LLCs (batches of 1024 flows).
//! - `steer/flow_table/lookup/{hit,miss}` and
//!   `steer/flow_table/rx_steer/stayed`: the per-packet reads.
//!
//! All groups time batches of 1024 flows and retry a batch during which the
//! thread was preempted (see `unpreempted`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam::utils::CachePadded;
use steer::core::cpu::{CpuId, CpuLayout, CpuSet};
use steer::core::policy::Policy;
use steer::core::table::{DesiredCpuTable, RxFlowTable, SlotCodec};
use steer::topology::thread;

const FLOWS: usize = 1024;

fn flows() -> Vec<u32> {
    // Distinct non-zero hashes spread over the table.
    (1..=FLOWS as u32)
        .map(|i| i.wrapping_mul(0x9e37_79b9) | 1)
        .collect()
}

/// What the false-sharing bench needs from a table layout.
trait Layout: Send + Sync + 'static {
    fn lookup(&self, hash: u32) -> Option<CpuId>;
    fn bump(&self);
}

/// Header fields shared by both layouts.
struct Header {
    codec: SlotCodec,
    index_mask: u32,
    entries: Box<[AtomicU32]>,
}

impl Header {
    fn new(entries: usize, nr_cpus: usize, flows: &[u32]) -> Self {
        let codec = SlotCodec::new(nr_cpus).unwrap();
        let entries: Box<[AtomicU32]> = (0..entries)
            .map(|_| AtomicU32::new(SlotCodec::EMPTY))
            .collect();
        let index_mask = entries.len() as u32 - 1;
        for (i, &f) in flows.iter().enumerate() {
            entries[(f & index_mask) as usize]
                .store(codec.encode(f, i % nr_cpus), Ordering::Relaxed);
        }
        Self {
            codec,
            index_mask,
            entries,
        }
    }

    #[inline]
    fn lookup(&self, hash: u32) -> Option<CpuId> {
        let ent = self.entries[(hash & self.index_mask) as usize].load(Ordering::Relaxed);
        self.codec.decode(ent, hash)
    }
}

/// Counters next to the header, in its cache line.
#[repr(C, align(64))]
struct Packed {
    header: Header,
    updates: AtomicU64,
    suppressed: AtomicU64,
}

/// Counters on their own padded line (the `DesiredCpuTable` layout).
#[repr(C)]
struct Split {
    header: Header,
    counters: CachePadded<(AtomicU64, AtomicU64)>,
}

impl Layout for Packed {
    fn lookup(&self, hash: u32) -> Option<CpuId> {
        self.header.lookup(hash)
    }
    fn bump(&self) {
        self.updates.fetch_add(1, Ordering::Relaxed);
        self.suppressed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Layout for Split {
    fn lookup(&self, hash: u32) -> Option<CpuId> {
        self.header.lookup(hash)
    }
    fn bump(&self) {
        self.counters.0.fetch_add(1, Ordering::Relaxed);
        self.counters.1.fetch_add(1, Ordering::Relaxed);
    }
}

/// The two CPUs to pin the reader and the hammer to, when we may use two,
/// so the scheduler cannot put both threads on one core (which would hide
/// the cache-line traffic this bench measures).
fn two_cpus() -> Option<(CpuSet, CpuId, CpuId)> {
    let allowed = thread::allowed_cpus().ok()?;
    Some((allowed, allowed.nth(0)?, allowed.nth(1)?))
}

/// Times one batch of lookups over `hashes`.
fn lookup_batch<L: Layout>(table: &L, hashes: &[u32]) -> usize {
    let mut found = 0usize;
    for &h in hashes {
        // black_box on the table: reload the header per lookup, as a
        // dispatcher does between packets.
        found += black_box(table).lookup(h).is_some() as usize;
    }
    found
}

/// A lookup batch taking longer than this was preempted: not timed.
const PREEMPTED: Duration = Duration::from_micros(100);

/// Times `iters` runs of `batch`, retrying a run that took longer than
/// [`PREEMPTED`] (the thread lost its CPU mid-run): on a small shared machine
/// a lost time slice would otherwise dominate the estimate.
fn unpreempted<R>(iters: u64, mut batch: impl FnMut() -> R) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        for attempt in 0..100 {
            let start = Instant::now();
            black_box(batch());
            let took = start.elapsed();
            if took < PREEMPTED || attempt == 99 {
                total += took;
                break;
            }
        }
    }
    total
}

fn false_sharing_case<L: Layout>(c: &mut Criterion, name: &str, table: L) {
    let pins = two_cpus();
    if let Some((_, reader, _)) = pins {
        let _ = thread::pin_current(reader);
    }
    let table = Arc::new(table);
    let stop = Arc::new(AtomicBool::new(false));
    // Bumped by the hammer every 8 writes, on its own line: lets the reader
    // keep only batches during which the hammer actually ran (on a loaded
    // machine it is often descheduled, which would hide the effect).
    let progress = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let hammer = {
        let (table, stop, progress) =
            (Arc::clone(&table), Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || {
            if let Some((_, _, writer)) = pins {
                let _ = thread::pin_current(writer);
            }
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..8 {
                    table.bump();
                }
                progress.store(progress.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        })
    };
    let hashes = flows();
    let (mut kept, mut retried) = (0u64, 0u64);
    let mut g = c.benchmark_group("steer/flow_table/false_sharing");
    g.throughput(Throughput::Elements(hashes.len() as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for attempt in 0..100 {
                    let before = progress.load(Ordering::Relaxed);
                    let start = Instant::now();
                    black_box(lookup_batch(&*table, &hashes));
                    let took = start.elapsed();
                    // Keep batches the hammer overlapped and the reader ran
                    // through (a preempted batch takes a time slice, >= ms).
                    let overlapped = progress.load(Ordering::Relaxed) != before;
                    if (overlapped && took < PREEMPTED) || attempt == 99 {
                        total += took;
                        kept += 1;
                        break;
                    }
                    retried += 1;
                }
            }
            total
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
    if let Some((allowed, _, _)) = pins {
        let _ = thread::set_allowed(&allowed);
    }
    eprintln!("false_sharing/{name}: {kept} batches timed, {retried} retried");
}

/// The real table: lookups while a second thread records intra-LLC churn
/// under `LlcAffinity` (suppressions: counter bumps, no entry writes).
struct Real {
    table: DesiredCpuTable,
    layout: CpuLayout,
    all: CpuSet,
    churn: AtomicU64,
}

impl Layout for Real {
    fn lookup(&self, hash: u32) -> Option<CpuId> {
        self.table.lookup(hash)
    }
    fn bump(&self) {
        let n = self.churn.fetch_add(1, Ordering::Relaxed);
        // A flow outside the looked-up set, hopping between CPUs 0 and 1.
        let _ = self
            .table
            .record(0x7fff_fff1, (n & 1) as usize, &self.all, &self.layout);
    }
}

fn false_sharing(c: &mut Criterion) {
    assert_eq!(std::mem::size_of::<Packed>(), 64, "packed fits one line");
    let f = flows();
    false_sharing_case(
        c,
        "split",
        Split {
            header: Header::new(4096, 256, &f),
            counters: CachePadded::new((AtomicU64::new(0), AtomicU64::new(0))),
        },
    );
    let layout = CpuLayout::uniform(256, 8).unwrap();
    let all = CpuSet::first(256);
    let table = DesiredCpuTable::with_policy(4096, 256, Policy::LlcAffinity).unwrap();
    for (i, &h) in f.iter().enumerate() {
        table.record(h, i % 256, &all, &layout).unwrap();
    }
    false_sharing_case(
        c,
        "desired_table_llc_churn",
        Real {
            table,
            layout,
            all,
            churn: AtomicU64::new(0),
        },
    );
    false_sharing_case(
        c,
        "packed",
        Packed {
            header: Header::new(4096, 256, &f),
            updates: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        },
    );
}

fn record(c: &mut Criterion) {
    // The seed machine's shape: 256 CPUs, LLCs of 8.
    let layout = CpuLayout::uniform(256, 8).unwrap();
    let all = CpuSet::first(256);
    let hashes = flows();
    let mut g = c.benchmark_group("steer/flow_table/record");
    g.throughput(Throughput::Elements(FLOWS as u64));
    for policy in [Policy::Always, Policy::LlcAffinity] {
        for (case, pair) in [
            ("same_cpu", [1, 1]),
            ("intra_llc", [1, 2]),
            ("cross_llc", [1, 9]),
        ] {
            let table = DesiredCpuTable::with_policy(4096, 256, policy).unwrap();
            let mut round = 0usize;
            g.bench_function(format!("{}/{case}", policy.name()), |b| {
                b.iter_custom(|iters| {
                    unpreempted(iters, || {
                        // Every flow's consumer alternates between the pair's
                        // CPUs from one batch to the next.
                        round += 1;
                        let cpu = pair[round & 1];
                        let mut wrote = 0usize;
                        for &flow in &hashes {
                            let out = table.record(black_box(flow), cpu, &all, &layout);
                            wrote += out.is_ok_and(|o| o.wrote()) as usize;
                        }
                        wrote
                    })
                })
            });
        }
    }
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let layout = CpuLayout::uniform(256, 8).unwrap();
    let all = CpuSet::first(256);
    let hashes = flows();
    let table = DesiredCpuTable::new(4096, 256).unwrap();
    for (i, &h) in hashes.iter().enumerate() {
        table.record(h, i % 256, &all, &layout).unwrap();
    }
    let misses: Vec<u32> = hashes.iter().map(|h| h ^ 0x8000_0000).collect();
    let mut g = c.benchmark_group("steer/flow_table/lookup");
    g.throughput(Throughput::Elements(FLOWS as u64));
    for (case, keys) in [("hit", &hashes), ("miss", &misses)] {
        g.bench_function(case, |b| {
            b.iter_custom(|iters| {
                unpreempted(iters, || {
                    let mut sum = 0usize;
                    for &h in keys.iter() {
                        sum = sum.wrapping_add(table.lookup(black_box(h)).unwrap_or(0));
                    }
                    sum
                })
            })
        });
    }
    g.finish();

    let mut rx = RxFlowTable::new(0, 4096).unwrap();
    let heads = |_c: CpuId| Some(0u64);
    for (i, &h) in hashes.iter().enumerate() {
        rx.steer(h, Some(i % 256), &layout, &heads, 0);
    }
    let mut g = c.benchmark_group("steer/flow_table/rx_steer");
    g.throughput(Throughput::Elements(FLOWS as u64));
    g.bench_function("stayed", |b| {
        b.iter_custom(|iters| {
            unpreempted(iters, || {
                let mut sum = 0usize;
                for (i, &h) in hashes.iter().enumerate() {
                    let s = rx.steer(black_box(h), Some(i % 256), &layout, &heads, 1);
                    sum = sum.wrapping_add(s.cpu.unwrap_or(0));
                }
                sum
            })
        })
    });
    g.finish();
}

criterion_group!(benches, false_sharing, record, lookup);
criterion_main!(benches);
