//! Per-CPU packet counters, the `/proc/net/softnet_stat` analog.
//!
//! Each CPU owns one [`CpuStats`] block on its own cache lines, so counting on
//! one CPU never invalidates a line another CPU writes (seed 004: contended
//! counters apart). The thread that runs on a CPU counts into a plain
//! [`LocalStats`] while it works and [`CpuStats::flush`]es it once per batch:
//! one relaxed `fetch_add` per non-zero counter per batch instead of one per
//! packet. Readers take a [`StatsSnapshot`] at any time; counts are exact once
//! the writers have flushed.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

use crate::cpu::CpuId;

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),+ $(,)?) => {
        /// Counts kept by the thread working on one CPU, flushed per batch.
        /// Serialized with one field per counter (a reader of a live
        /// engine's stats deserializes it; a missing field reads as 0).
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct LocalStats {
            $( $(#[$doc])* pub $name: u64, )+
        }

        /// One CPU's shared counters (see [`LocalStats`] for their meaning).
        #[derive(Debug, Default)]
        #[doc(alias = "softnet_data")]
        pub struct CpuStats {
            $( $name: AtomicU64, )+
        }

        impl CpuStats {
            /// Adds `local` into the shared counters and zeroes it.
            pub fn flush(&self, local: &mut LocalStats) {
                $(
                    if local.$name != 0 {
                        self.$name.fetch_add(local.$name, Ordering::Relaxed);
                    }
                )+
                *local = LocalStats::default();
            }

            /// The counters now.
            pub fn load(&self) -> LocalStats {
                LocalStats { $( $name: self.$name.load(Ordering::Relaxed), )+ }
            }
        }

        impl LocalStats {
            /// Field-wise sum.
            pub fn add(&mut self, other: &LocalStats) {
                $( self.$name += other.$name; )+
            }
        }
    };
}

counters! {
    /// Frames this CPU's dispatcher took off its rx queues.
    rx,
    /// Packets handed to the user's handler (inline or from a ring).
    processed,
    /// Packets dropped because the target ring was full (frame returned to its pool).
    dropped,
    /// Packets dropped by the per-CPU flow limit (elephant flows).
    flow_limit_drops,
    /// Packets run inline on the dispatcher's own CPU, skipping the ring.
    fast_path,
    /// Packets this CPU received from other CPUs' dispatchers through rings.
    steered_in,
    /// Packets this CPU's dispatcher sent to other CPUs through rings.
    steered_out,
    /// Packets this CPU's dispatcher queued to its own CPU's ring (fast path off, or earlier packets still queued).
    queued_local,
    /// Steering-hook calls (flow moved to another CPU).
    hook_calls,
    /// Steering-hook calls that failed.
    hook_errors,
    /// Flow moves held back because the old CPU still had earlier packets of the flow queued.
    held_back,
    /// Times a worker stopped draining with work left because its batch budget ran out.
    time_squeeze,
    /// Frames that failed to parse (malformed or truncated), counted and not steered by flow.
    malformed,
    /// Frames without a flow (non-IP), steered by the fallback rule.
    no_flow,
    /// Packets dropped because their worker died: queued to it, or pushed to its ring as it went (frame returned to its pool).
    worker_gone_drops,
    /// Nanoseconds the worker on this CPU spent in rounds that did work
    /// (polling, dispatching, handling), read from the clock once per round.
    busy_ns,
    /// Times the worker on this CPU went to sleep until woken (a doorbell, a
    /// socket, or the sleep timeout).
    sleeps,
    /// Timer naps of the worker on this CPU after work (interrupt deferral:
    /// polls nobody had to wake it for).
    naps,
}

/// The shared counters of every CPU, one cache-padded block each.
///
/// ```
/// use steer_core::stats::{LocalStats, Stats};
/// let stats = Stats::new(2);
/// let mut local = LocalStats::default();
/// local.processed += 3;
/// stats.cpu(1).unwrap().flush(&mut local);
/// assert_eq!(local.processed, 0);
/// let snap = stats.snapshot();
/// assert_eq!(snap.per_cpu[1].1.processed, 3);
/// assert_eq!(snap.total.processed, 3);
/// assert!(snap.to_json().contains("\"processed\":3"));
/// ```
#[derive(Debug)]
#[doc(alias = "softnet_stat")]
pub struct Stats {
    cpus: Box<[CachePadded<CpuStats>]>,
}

impl Stats {
    /// Counters for CPUs `0..nr_cpus`.
    pub fn new(nr_cpus: usize) -> Self {
        Self {
            cpus: (0..nr_cpus)
                .map(|_| CachePadded::new(CpuStats::default()))
                .collect(),
        }
    }

    /// The block of `cpu`, if it exists.
    #[inline]
    pub fn cpu(&self, cpu: CpuId) -> Option<&CpuStats> {
        self.cpus.get(cpu).map(|c| &**c)
    }

    /// Number of CPU blocks.
    pub fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Every CPU's counters and their sum.
    pub fn snapshot(&self) -> StatsSnapshot {
        let per_cpu: Vec<(CpuId, LocalStats)> = self
            .cpus
            .iter()
            .enumerate()
            .map(|(c, s)| (c, s.load()))
            .collect();
        let mut total = LocalStats::default();
        for (_, s) in &per_cpu {
            total.add(s);
        }
        StatsSnapshot { per_cpu, total }
    }
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[doc(alias = "softnet_stat")]
pub struct StatsSnapshot {
    /// `(cpu, counters)` for every CPU.
    pub per_cpu: Vec<(CpuId, LocalStats)>,
    /// Sum over CPUs.
    pub total: LocalStats,
}

impl StatsSnapshot {
    /// The snapshot as JSON: `{"per_cpu": [[cpu, {...}], ...], "total": {...}}`.
    pub fn to_json(&self) -> String {
        // Serializing plain integers and vectors cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_adds_and_zeroes() {
        let stats = Stats::new(3);
        let mut a = LocalStats {
            processed: 5,
            dropped: 1,
            ..Default::default()
        };
        stats.cpu(0).unwrap().flush(&mut a);
        assert_eq!(a, LocalStats::default());
        let mut b = LocalStats {
            processed: 2,
            hook_calls: 7,
            ..Default::default()
        };
        stats.cpu(2).unwrap().flush(&mut b);
        let snap = stats.snapshot();
        assert_eq!(snap.total.processed, 7);
        assert_eq!(snap.total.dropped, 1);
        assert_eq!(snap.per_cpu[2].1.hook_calls, 7);
        assert!(stats.cpu(3).is_none());
    }

    #[test]
    fn blocks_do_not_share_cache_lines() {
        let stats = Stats::new(2);
        let a = stats.cpu(0).unwrap() as *const CpuStats as usize;
        let b = stats.cpu(1).unwrap() as *const CpuStats as usize;
        assert!(b - a >= 128 && a.is_multiple_of(128));
    }

    #[test]
    fn concurrent_flushes_lose_nothing() {
        let stats = std::sync::Arc::new(Stats::new(1));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let stats = stats.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut l = LocalStats {
                            processed: 1,
                            ..Default::default()
                        };
                        stats.cpu(0).unwrap().flush(&mut l);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(stats.snapshot().total.processed, 20_000);
    }

    #[test]
    fn json_has_every_counter() {
        let json = Stats::new(1).snapshot().to_json();
        for name in [
            "processed",
            "dropped",
            "flow_limit_drops",
            "fast_path",
            "steered_in",
            "steered_out",
            "hook_calls",
            "held_back",
            "time_squeeze",
            "malformed",
        ] {
            assert!(
                json.contains(&format!("\"{name}\":0")),
                "{name} missing in {json}"
            );
        }
    }
}
