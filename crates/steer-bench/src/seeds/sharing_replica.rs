//! Seeds 002/004's replica: two-thread throughput of a flow-table header
//! and its counters, packed into one cache line against split onto their
//! own line, with both threads measured over a fixed time.
//!
//! It copies the layouts of `benches/table.rs`
//! (`steer/flow_table/false_sharing/{packed,split}`). The criterion bench
//! times only the reader; this measures the reader's lookups per second
//! (1024 flows in a 4096-entry table, the header reloaded per lookup as a
//! dispatcher does between packets) and the writer's counter increments
//! per second (two relaxed `fetch_add`s per bump, as `record` bumps its
//! counters). Each layout also runs each thread alone, the no-contention
//! reference. Reader and writer are pinned to two different CPUs.
//!
//! Invariant: `Packed` is exactly one 64-byte line; `Split`'s counters sit
//! on their own 128-byte aligned block (the x86_64 prefetcher pulls lines
//! in pairs). Measure with an optimised build (`--release`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

const FLOWS: u32 = 1024;
const ENTRIES: usize = 4096;
const NR_CPUS: u32 = 256;

/// The read-mostly header: codec, index mask, entries (as in benches/table.rs).
struct Header {
    cpu_mask: u32,
    nr_cpus: u32,
    index_mask: u32,
    entries: Box<[AtomicU32]>,
}

impl Header {
    fn new() -> Self {
        let cpu_mask = (NR_CPUS + 1).next_power_of_two() - 1;
        let entries: Box<[AtomicU32]> = (0..ENTRIES).map(|_| AtomicU32::new(u32::MAX)).collect();
        let index_mask = ENTRIES as u32 - 1;
        for (i, f) in flows().into_iter().enumerate() {
            let ent = (f & !cpu_mask) | (i as u32 % NR_CPUS);
            entries[(f & index_mask) as usize].store(ent, Ordering::Relaxed);
        }
        Self {
            cpu_mask,
            nr_cpus: NR_CPUS,
            index_mask,
            entries,
        }
    }

    #[inline]
    fn lookup(&self, hash: u32) -> Option<u32> {
        let ent = self.entries[(hash & self.index_mask) as usize].load(Ordering::Relaxed);
        if (ent ^ hash) & !self.cpu_mask != 0 {
            return None;
        }
        let cpu = ent & self.cpu_mask;
        (cpu < self.nr_cpus).then_some(cpu)
    }
}

trait Layout: Send + Sync + 'static {
    fn header(&self) -> &Header;
    fn bump(&self);
}

/// Counters in the header's cache line.
#[repr(C, align(64))]
struct Packed {
    header: Header,
    updates: AtomicU64,
    suppressed: AtomicU64,
}

/// 128 bytes: the x86_64 prefetcher pulls cache lines in pairs.
#[repr(C, align(128))]
struct Padded<T>(T);

/// Counters on their own (128-byte aligned) line.
#[repr(C)]
struct Split {
    header: Header,
    counters: Padded<(AtomicU64, AtomicU64)>,
}

impl Layout for Packed {
    fn header(&self) -> &Header {
        &self.header
    }
    fn bump(&self) {
        self.updates.fetch_add(1, Ordering::Relaxed);
        self.suppressed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Layout for Split {
    fn header(&self) -> &Header {
        &self.header
    }
    fn bump(&self) {
        self.counters.0 .0.fetch_add(1, Ordering::Relaxed);
        self.counters.0 .1.fetch_add(1, Ordering::Relaxed);
    }
}

fn flows() -> Vec<u32> {
    (1..=FLOWS)
        .map(|i| i.wrapping_mul(0x9e37_79b9) | 1)
        .collect()
}

struct Rates {
    lookups_per_s: f64,
    increments_per_s: f64,
}

/// Runs the reader and/or the writer on `table` for `secs`.
fn run<L: Layout>(table: Arc<L>, secs: f64, reader: Option<usize>, writer: Option<usize>) -> Rates {
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(AtomicBool::new(false));
    let w = writer.map(|cpu| {
        let (table, stop, go) = (Arc::clone(&table), Arc::clone(&stop), Arc::clone(&go));
        std::thread::spawn(move || {
            let _ = crate::sys::pin(cpu);
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            let mut bumps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    black_box(&*table).bump();
                }
                bumps += 64;
            }
            (bumps, start.elapsed())
        })
    });
    let r = reader.map(|cpu| {
        let (table, stop, go) = (Arc::clone(&table), Arc::clone(&stop), Arc::clone(&go));
        std::thread::spawn(move || {
            let _ = crate::sys::pin(cpu);
            let hashes = flows();
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            let (mut lookups, mut found) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                for &h in &hashes {
                    found += black_box(&*table).header().lookup(h).is_some() as u64;
                }
                lookups += hashes.len() as u64;
            }
            black_box(found);
            (lookups, start.elapsed())
        })
    });
    go.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let rate = |h: Option<std::thread::JoinHandle<(u64, Duration)>>| {
        h.map(|h| {
            let (n, d) = h.join().expect("thread panicked");
            n as f64 / d.as_secs_f64()
        })
        .unwrap_or(0.0)
    };
    Rates {
        lookups_per_s: rate(r),
        // Two counters per bump.
        increments_per_s: 2.0 * rate(w),
    }
}

/// One case of the replica: which threads ran, which layout, the rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Case {
    /// `both`, `reader_alone` or `writer_alone`.
    pub case: &'static str,
    /// `split` or `packed`.
    pub layout: &'static str,
    /// Reader lookups per second (0 without a reader).
    pub lookups_per_s: u64,
    /// Writer counter increments per second (0 without a writer).
    pub increments_per_s: u64,
}

/// Runs every case (both threads, reader alone, writer alone; split and
/// packed) for `secs` each, the reader on `reader_cpu`, the writer on
/// `writer_cpu`.
pub fn run_all(secs: f64, reader_cpu: usize, writer_cpu: usize) -> Result<Vec<Case>> {
    // Try the pinning in a throwaway thread (the caller's stays unpinned).
    let pinnable = std::thread::spawn(move || {
        crate::sys::pin(reader_cpu).is_ok() && crate::sys::pin(writer_cpu).is_ok()
    })
    .join()
    .unwrap_or(false);
    if !pinnable {
        bail!("false sharing replica: cannot pin to CPUs {reader_cpu} and {writer_cpu}");
    }
    assert_eq!(std::mem::size_of::<Packed>(), 64, "packed fits one line");
    let mut out = Vec::new();
    for (case, reader, writer) in [
        ("both", Some(reader_cpu), Some(writer_cpu)),
        ("reader_alone", Some(reader_cpu), None),
        ("writer_alone", None, Some(writer_cpu)),
    ] {
        for layout in ["split", "packed"] {
            let rates = if layout == "split" {
                run(
                    Arc::new(Split {
                        header: Header::new(),
                        counters: Padded((AtomicU64::new(0), AtomicU64::new(0))),
                    }),
                    secs,
                    reader,
                    writer,
                )
            } else {
                run(
                    Arc::new(Packed {
                        header: Header::new(),
                        updates: AtomicU64::new(0),
                        suppressed: AtomicU64::new(0),
                    }),
                    secs,
                    reader,
                    writer,
                )
            };
            out.push(Case {
                case,
                layout,
                lookups_per_s: rates.lookups_per_s.round() as u64,
                increments_per_s: rates.increments_per_s.round() as u64,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_measures_its_threads() {
        let cases = run_all(0.05, 0, 0).unwrap();
        assert_eq!(cases.len(), 6);
        for c in &cases {
            assert_eq!(c.lookups_per_s > 0, c.case != "writer_alone", "{c:?}");
            assert_eq!(c.increments_per_s > 0, c.case != "reader_alone", "{c:?}");
        }
        assert_eq!(
            cases.iter().map(|c| (c.case, c.layout)).collect::<Vec<_>>(),
            [
                ("both", "split"),
                ("both", "packed"),
                ("reader_alone", "split"),
                ("reader_alone", "packed"),
                ("writer_alone", "split"),
                ("writer_alone", "packed"),
            ]
        );
    }

    #[test]
    fn lookups_find_the_flows() {
        let h = Header::new();
        // A flow is found unless a later flow took its slot.
        let slots: std::collections::BTreeSet<u32> =
            flows().into_iter().map(|f| f & h.index_mask).collect();
        let found = flows()
            .into_iter()
            .filter(|&f| h.lookup(f).is_some())
            .count();
        assert_eq!(found, slots.len());
        assert!(found > 900, "{found}");
        assert_eq!(h.lookup(0), None, "an empty slot");
    }
}
