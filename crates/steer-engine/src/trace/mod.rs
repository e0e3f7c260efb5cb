//! Recording the trace `steer replay` reads, from a running engine
//! ([`EngineBuilder::record_trace`](crate::engine::EngineBuilder::record_trace)):
//! every packet arrival (its flow hash, rx queue and time) and every
//! consumption flow delivery records (flow, CPU, allowed CPUs, time), after
//! a header naming the machine's LLCs and the engine's settings, so the
//! replay reproduces this engine by default.
//!
//! Off the hot path: the workers and reading threads only push small
//! events into a bounded lock-free queue (the crate-private `TraceSink`); a background
//! thread drains it to the file every millisecond. A full queue drops the
//! event (counted, never blocks); after `max_events` events the file is
//! complete and the rest are not recorded (counted). Times are ns since the
//! recording started; the writer keeps them non-decreasing (events pushed
//! by different threads a few microseconds out of order are written in
//! time order within a drain, and clamped across drains).
//!
//! Invariants: the file always starts with the header and ends with a
//! `# recorded ...` comment once the recording is finished (the engine
//! stops); at most
//! `max_events` event lines are written.

mod source;

use std::cell::RefCell;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use steer_core::cpu::{CpuId, CpuSet};

pub(crate) use source::TracedSource;

/// Events the queue holds at most (about 1.5 MiB).
const QUEUE: usize = 1 << 16;

/// How long the writer sleeps when the queue is empty.
const DRAIN_EVERY: Duration = Duration::from_millis(1);

static NEXT_SINK_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The last allowed set this thread recorded: (sink, set, its id).
    static LAST_SET: RefCell<Option<(usize, CpuSet, u32)>> = const { RefCell::new(None) };
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Packet {
        t: u64,
        hash: u32,
        rxq: u32,
    },
    Consume {
        t: u64,
        hash: u32,
        cpu: u32,
        set: u32,
    },
}

impl Ev {
    fn t(&self) -> u64 {
        match *self {
            Self::Packet { t, .. } | Self::Consume { t, .. } => t,
        }
    }
}

/// Where the engine's threads put trace events.
#[derive(Debug)]
pub(crate) struct TraceSink {
    id: usize,
    queue: ArrayQueue<Ev>,
    start: Instant,
    /// `max_events` reached: producers stop pushing.
    full: AtomicBool,
    /// Events lost because the queue was full.
    dropped: AtomicU64,
    /// Allowed sets seen, id `i + 1` (0: every CPU of the machine).
    sets: Mutex<Vec<CpuSet>>,
    machine: CpuSet,
}

impl TraceSink {
    /// Ns since the recording started.
    pub(crate) fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Whether events are still wanted.
    pub(crate) fn recording(&self) -> bool {
        !self.full.load(Ordering::Relaxed)
    }

    fn push(&self, ev: Ev) {
        if self.queue.push(ev).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A packet of flow `hash` arrived on rx queue `rxq` at `t` (ns).
    pub(crate) fn packet(&self, t: u64, rxq: u32, hash: u32) {
        self.push(Ev::Packet { t, hash, rxq });
    }

    /// A thread on `cpu`, allowed on `allowed`, consumed flow `hash` now.
    pub(crate) fn consumed(&self, hash: u32, cpu: CpuId, allowed: &CpuSet) {
        if !self.recording() {
            return;
        }
        let set = self.set_id(allowed);
        self.push(Ev::Consume {
            t: self.now_ns(),
            hash,
            cpu: cpu as u32,
            set,
        });
    }

    /// The id of `allowed` (cached per thread: a thread's set rarely changes).
    fn set_id(&self, allowed: &CpuSet) -> u32 {
        LAST_SET.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((sink, set, id)) = *last {
                if sink == self.id && set == *allowed {
                    return id;
                }
            }
            let id = if self.machine.iter().all(|c| allowed.contains(c)) {
                0
            } else {
                let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
                match sets.iter().position(|s| s == allowed) {
                    Some(i) => i as u32 + 1,
                    None => {
                        sets.push(*allowed);
                        sets.len() as u32
                    }
                }
            };
            *last = Some((self.id, *allowed, id));
            id
        })
    }
}

/// What a finished recording wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSummary {
    /// The file.
    pub path: PathBuf,
    /// Event lines written.
    pub events: u64,
    /// Events lost because the queue was full (the writer fell behind).
    pub dropped: u64,
    /// Events not recorded because `max_events` was reached.
    pub over_limit: u64,
    /// The writer's I/O error, if it hit one (the file is then cut short).
    pub error: Option<String>,
}

/// The recording: the sink the engine's threads push to, and the thread
/// writing the file.
#[derive(Debug)]
pub(crate) struct TraceWriter {
    sink: Arc<TraceSink>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(u64, u64, Option<String>)>>,
    path: PathBuf,
}

impl TraceWriter {
    /// Creates `path`, writes `header` and starts the writer thread.
    pub(crate) fn create(
        path: &Path,
        max_events: u64,
        header: &str,
        machine: CpuSet,
    ) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(header.as_bytes())?;
        out.flush()?;
        let sink = Arc::new(TraceSink {
            id: NEXT_SINK_ID.fetch_add(1, Ordering::Relaxed),
            queue: ArrayQueue::new(QUEUE),
            start: Instant::now(),
            full: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            sets: Mutex::new(Vec::new()),
            machine,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (sink, stop) = (Arc::clone(&sink), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("steer-trace".into())
                .spawn(move || write_loop(&sink, &stop, out, max_events))?
        };
        Ok(Self {
            sink,
            stop,
            thread: Some(thread),
            path: path.to_path_buf(),
        })
    }

    /// The sink to hand to the engine's threads.
    pub(crate) fn sink(&self) -> Arc<TraceSink> {
        Arc::clone(&self.sink)
    }

    /// Writes what is queued, the closing comment, and closes the file.
    /// Call once every producer has stopped.
    pub(crate) fn finish(mut self) -> TraceSummary {
        self.stop.store(true, Ordering::Release);
        let (events, over_limit, error) = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => (0, 0, Some("the trace writer panicked".into())),
        };
        TraceSummary {
            path: self.path.clone(),
            events,
            dropped: self.sink.dropped.load(Ordering::Relaxed),
            over_limit,
            error,
        }
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One event as a trace line (appended to `line`).
fn format_event(line: &mut String, ev: Ev, t: u64, sets: &[CpuSet]) {
    match ev {
        Ev::Packet { hash, rxq, .. } => {
            let _ = writeln!(line, "p {hash:#010x} {rxq} t={t}");
        }
        Ev::Consume { hash, cpu, set, .. } => {
            let _ = write!(line, "c {hash:#010x} {cpu}");
            if let Some(s) = set.checked_sub(1).and_then(|i| sets.get(i as usize)) {
                let _ = write!(line, " allowed={s}");
            }
            let _ = writeln!(line, " t={t}");
        }
    }
}

/// The writer thread: drain, sort the drained batch by time, write, sleep.
fn write_loop(
    sink: &TraceSink,
    stop: &AtomicBool,
    mut out: BufWriter<File>,
    max_events: u64,
) -> (u64, u64, Option<String>) {
    let (mut written, mut over, mut last_t) = (0u64, 0u64, 0u64);
    let mut batch: Vec<Ev> = Vec::with_capacity(QUEUE);
    let mut line = String::new();
    let mut error = None;
    loop {
        // Read the flag first: whatever was pushed before it is drained below.
        let stopping = stop.load(Ordering::Acquire);
        while let Some(ev) = sink.queue.pop() {
            batch.push(ev);
        }
        if !batch.is_empty() {
            batch.sort_by_key(Ev::t);
            let sets = sink
                .sets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            line.clear();
            for ev in batch.drain(..) {
                if written >= max_events {
                    over += 1;
                    continue;
                }
                last_t = last_t.max(ev.t());
                format_event(&mut line, ev, last_t, &sets);
                written += 1;
            }
            if written >= max_events {
                sink.full.store(true, Ordering::Relaxed);
            }
            if error.is_none() {
                if let Err(e) = out.write_all(line.as_bytes()) {
                    error = Some(e.to_string());
                }
            }
        }
        if stopping {
            break;
        }
        std::thread::sleep(DRAIN_EVERY);
    }
    let dropped = sink.dropped.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# recorded {written} events; {dropped} lost (queue full); {over} over the limit of {max_events}"
    );
    if let Err(e) = out.flush() {
        error.get_or_insert(e.to_string());
    }
    (written, over, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_events_in_time_order_and_a_closing_line() {
        let path =
            std::env::temp_dir().join(format!("steer-trace-unit-{}.trace", std::process::id()));
        let w = TraceWriter::create(&path, 3, "llcs 0-1 2-3\n", CpuSet::first(4)).unwrap();
        let sink = w.sink();
        sink.packet(50, 1, 0xabc);
        sink.packet(20, 0, 0xdef);
        sink.consumed(0xabc, 3, &CpuSet::first(4));
        let pinned: CpuSet = [3].into_iter().collect();
        sink.consumed(0xabc, 3, &pinned);
        let summary = w.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "llcs 0-1 2-3");
        assert_eq!(lines.len(), 5, "limit of 3 events: {text}");
        // Both packets (pushed out of time order) and the first consumption,
        // in non-decreasing time.
        let mut events: Vec<&str> = lines[1..4]
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().0)
            .collect();
        events.sort_unstable();
        assert_eq!(
            events,
            ["c 0x00000abc 3", "p 0x00000abc 1", "p 0x00000def 0"],
            "{text}"
        );
        let times: Vec<u64> = lines[1..4]
            .iter()
            .map(|l| l.rsplit_once("t=").unwrap().1.parse().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}");
        assert!(lines[4].starts_with("# recorded 3 events"), "{text}");
        assert_eq!(
            (summary.events, summary.over_limit, summary.dropped),
            (3, 1, 0)
        );
        assert!(!sink.recording());
        assert!(summary.error.is_none());
    }

    #[test]
    fn restricted_threads_name_their_cpus() {
        let mut line = String::new();
        let sets = vec![[3].into_iter().collect::<CpuSet>()];
        // A consume on CPU 3 by a thread restricted to `sets[set - 1]`
        // (set 0: unrestricted).
        for set in [1, 0] {
            let ev = Ev::Consume {
                t: 0,
                hash: 5,
                cpu: 3,
                set,
            };
            format_event(&mut line, ev, 9, &sets);
        }
        assert_eq!(line, "c 0x00000005 3 allowed=3 t=9\nc 0x00000005 3 t=9\n");
    }
}
