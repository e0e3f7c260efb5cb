//! Two-thread throughput of a flow-table header and its counters, packed in
//! one cache line against split onto their own line (seeds 002 and 004).
//!
//! A std-only replica of the layouts of `benches/table.rs`
//! (`steer/flow_table/false_sharing/{packed,split}`), built with plain
//! `rustc -O` by `seed002-004-false-sharing.sh` (it is not a cargo target).
//! The criterion bench times only the reader; this measures both threads
//! over a fixed time: the reader's lookups per second (1024 flows in a
//! 4096-entry table, the header reloaded per lookup as a dispatcher does
//! between packets) and the writer's counter increments per second (two
//! relaxed `fetch_add`s per bump, as `record` bumps its counters). Each
//! layout also runs each thread alone, as the no-contention reference.
//! Reader and writer are pinned to two different CPUs.
//!
//! Usage: false_sharing [SECONDS_PER_CASE] [READER_CPU] [WRITER_CPU]
//! Prints one line per case: `case=... layout=... lookups_per_s=...
//! increments_per_s=...`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLOWS: u32 = 1024;
const ENTRIES: usize = 4096;
const NR_CPUS: u32 = 256;

extern "C" {
    fn sched_setaffinity(pid: i32, cpusetsize: usize, mask: *const u64) -> i32;
}

fn pin(cpu: usize) -> bool {
    let mut mask = [0u64; 16];
    if cpu >= 1024 {
        return false;
    }
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: mask is a valid 1024-bit cpu_set_t for the calling thread (pid 0).
    unsafe { sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr()) == 0 }
}

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
            pin(cpu);
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
            pin(cpu);
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rcpu: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let wcpu: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    if !pin(rcpu) || !pin(wcpu) {
        eprintln!("false_sharing: cannot pin to CPUs {rcpu} and {wcpu}");
        std::process::exit(1);
    }
    assert_eq!(std::mem::size_of::<Packed>(), 64, "packed fits one line");
    for (case, reader, writer) in [
        ("both", Some(rcpu), Some(wcpu)),
        ("reader_alone", Some(rcpu), None),
        ("writer_alone", None, Some(wcpu)),
    ] {
        for layout in ["split", "packed"] {
            let rates = match layout {
                "split" => run(
                    Arc::new(Split {
                        header: Header::new(),
                        counters: Padded((AtomicU64::new(0), AtomicU64::new(0))),
                    }),
                    secs,
                    reader,
                    writer,
                ),
                _ => run(
                    Arc::new(Packed {
                        header: Header::new(),
                        updates: AtomicU64::new(0),
                        suppressed: AtomicU64::new(0),
                    }),
                    secs,
                    reader,
                    writer,
                ),
            };
            println!(
                "case={case} layout={layout} lookups_per_s={:.0} increments_per_s={:.0}",
                rates.lookups_per_s, rates.increments_per_s
            );
        }
    }
}
