//! Where the simulated application consumes each flow: the trace's own
//! consumption events, or a model that reads every packet right after a
//! worker handled it (as flow delivery's reader does) on a CPU it chooses.
//!
//! Models, all deterministic (the random ones draw from a seeded
//! splitmix64):
//! - [`ConsumerModel::Trace`]: no model; only the trace's `Consume` events
//!   record anything.
//! - [`ConsumerModel::Hash`]: one consumer per flow, on the worker CPU
//!   `hash % n` (the `n` worker CPUs in ascending order); never moves.
//! - [`ConsumerModel::First`]: the flow is consumed on the CPU that handled
//!   its first packet (one pinned runtime per core, like `steer proxy
//!   --runtime per-core`).
//! - [`ConsumerModel::Migrate`]: tokio's multi-thread runtime, roughly: one
//!   consumer thread per worker CPU, a flow's task on thread `hash % n`;
//!   every `period_ns` (phase-shifted per thread) each thread moves to
//!   another online worker CPU, one of its own LLC with probability
//!   `same_llc` (the scheduler prefers the cache domain), else one of
//!   another LLC.
//!
//! Invariant: a model only ever names a worker CPU of the simulation.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::cpu::{CpuId, CpuLayout, CpuSet};

/// How the simulated application consumes flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConsumerModel {
    /// Only the trace's consumption events.
    Trace,
    /// Flow `hash` consumed on worker CPU `hash % n`, for good.
    Hash,
    /// Consumed where the flow's first packet was handled.
    First,
    /// Consumer threads that migrate every `period_ns`, within their LLC
    /// with probability `same_llc`.
    Migrate {
        /// Time between two moves of one thread (ns).
        period_ns: u64,
        /// Probability that a move stays in the thread's LLC.
        same_llc: f64,
    },
}

/// Error from parsing a [`ConsumerModel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadModel(pub String);

impl fmt::Display for BadModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad consumer model {:?}: expected `trace`, `hash`, `first` or \
             `migrate:<ms>[:<same_llc_fraction>]` (e.g. `migrate:10:0.9`)",
            self.0
        )
    }
}

impl std::error::Error for BadModel {}

impl FromStr for ConsumerModel {
    type Err = BadModel;

    /// `trace`, `hash`, `first`, `migrate:<ms>` or `migrate:<ms>:<p>`
    /// (`<ms>` > 0, may be fractional; `0 <= p <= 1`, default 0.9).
    ///
    /// ```
    /// use steer_core::sim::ConsumerModel;
    /// assert_eq!("hash".parse(), Ok(ConsumerModel::Hash));
    /// assert_eq!(
    ///     "migrate:2.5:0.5".parse(),
    ///     Ok(ConsumerModel::Migrate { period_ns: 2_500_000, same_llc: 0.5 })
    /// );
    /// assert!("migrate:0".parse::<ConsumerModel>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadModel(s.to_string());
        let mut parts = s.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("trace"), None, ..) => Ok(Self::Trace),
            (Some("hash"), None, ..) => Ok(Self::Hash),
            (Some("first"), None, ..) => Ok(Self::First),
            (Some("migrate"), Some(ms), p, None) => {
                let ms: f64 = ms.parse().map_err(|_| bad())?;
                let same_llc: f64 = match p {
                    Some(p) => p.parse().map_err(|_| bad())?,
                    None => 0.9,
                };
                let period_ns = ms * 1e6;
                if !((1.0..1e18).contains(&period_ns) && (0.0..=1.0).contains(&same_llc)) {
                    return Err(bad());
                }
                Ok(Self::Migrate {
                    period_ns: period_ns as u64,
                    same_llc,
                })
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for ConsumerModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Trace => f.write_str("trace"),
            Self::Hash => f.write_str("hash"),
            Self::First => f.write_str("first"),
            Self::Migrate {
                period_ns,
                same_llc,
            } => write!(f, "migrate:{}:{same_llc}", *period_ns as f64 / 1e6),
        }
    }
}

/// splitmix64: a tiny, well-mixed, seedable generator (enough for a model).
#[derive(Debug, Clone)]
pub(super) struct SplitMix(u64);

impl SplitMix {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// One migrating consumer thread.
#[derive(Debug, Clone, Copy)]
struct Thread {
    cpu: CpuId,
    next_move: u64,
}

/// A model's state during a run.
#[derive(Debug)]
pub(super) struct Consumers {
    model: ConsumerModel,
    workers: Vec<CpuId>,
    first: HashMap<u32, CpuId>,
    threads: Vec<Thread>,
    rng: SplitMix,
    /// Thread moves so far (Migrate).
    pub(super) migrations: u64,
}

impl Consumers {
    pub(super) fn new(model: ConsumerModel, workers: &CpuSet, seed: u64) -> Self {
        let workers: Vec<CpuId> = workers.iter().collect();
        let threads = match model {
            ConsumerModel::Migrate { period_ns, .. } => {
                let n = workers.len().max(1) as u64;
                workers
                    .iter()
                    .enumerate()
                    .map(|(k, &cpu)| Thread {
                        cpu,
                        // Spread the first moves over one period.
                        next_move: period_ns + period_ns * k as u64 / n,
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        Self {
            model,
            workers,
            first: HashMap::new(),
            threads,
            rng: SplitMix::new(seed),
            migrations: 0,
        }
    }

    pub(super) fn model(&self) -> ConsumerModel {
        self.model
    }

    /// The CPU on which the consumer of `hash` reads the packet a worker on
    /// `handled_on` finished at `at`; `None` under [`ConsumerModel::Trace`].
    pub(super) fn reader(
        &mut self,
        hash: u32,
        handled_on: CpuId,
        at: u64,
        layout: &CpuLayout,
    ) -> Option<CpuId> {
        let n = self.workers.len();
        if n == 0 {
            return None;
        }
        match self.model {
            ConsumerModel::Trace => None,
            ConsumerModel::Hash => self.workers.get(hash as usize % n).copied(),
            ConsumerModel::First => Some(*self.first.entry(hash).or_insert(handled_on)),
            ConsumerModel::Migrate {
                period_ns,
                same_llc,
            } => {
                let k = hash as usize % n;
                self.advance(k, at, period_ns, same_llc, layout);
                self.threads.get(k).map(|t| t.cpu)
            }
        }
    }

    /// Applies thread `k`'s moves due by `at`.
    fn advance(&mut self, k: usize, at: u64, period_ns: u64, same_llc: f64, layout: &CpuLayout) {
        let Some(mut t) = self.threads.get(k).copied() else {
            return;
        };
        while t.next_move <= at {
            t.cpu = self.pick(t.cpu, same_llc, layout);
            t.next_move = t.next_move.saturating_add(period_ns);
            self.migrations += 1;
        }
        if let Some(slot) = self.threads.get_mut(k) {
            *slot = t;
        }
    }

    /// Where a thread on `from` moves to.
    fn pick(&mut self, from: CpuId, same_llc: f64, layout: &CpuLayout) -> CpuId {
        let online: Vec<CpuId> = self
            .workers
            .iter()
            .copied()
            .filter(|&c| c != from && layout.is_online(c))
            .collect();
        let (near, far): (Vec<CpuId>, Vec<CpuId>) =
            online.iter().partition(|&&c| layout.shares_llc(c, from));
        let stay_near = self.rng.unit() < same_llc;
        let pool = match (stay_near, near.is_empty(), far.is_empty()) {
            (true, false, _) | (false, false, true) => &near,
            (_, _, false) => &far,
            (_, true, true) => return from,
        };
        pool.get(self.rng.below(pool.len()))
            .copied()
            .unwrap_or(from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_models() {
        for s in ["trace", "hash", "first", "migrate:10:0.9", "migrate:0.5:0"] {
            let m: ConsumerModel = s.parse().unwrap();
            assert_eq!(m.to_string(), s);
        }
        assert_eq!(
            "migrate:10".parse(),
            Ok(ConsumerModel::Migrate {
                period_ns: 10_000_000,
                same_llc: 0.9
            })
        );
        for bad in [
            "",
            "hash:1",
            "migrate",
            "migrate:x",
            "migrate:-1",
            "migrate:1:1.5",
            "migrate:1:0.5:3",
            "tokio",
        ] {
            assert!(bad.parse::<ConsumerModel>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn migrating_threads_stay_in_their_llc_when_told_to() {
        let layout = CpuLayout::uniform(8, 4).unwrap();
        let model = ConsumerModel::Migrate {
            period_ns: 1000,
            same_llc: 1.0,
        };
        let mut c = Consumers::new(model, &CpuSet::first(8), 7);
        let mut seen = CpuSet::new();
        for step in 0..200u64 {
            let cpu = c.reader(1, 0, step * 1000, &layout).unwrap();
            assert!(cpu < 4, "thread 1 started on CPU 1, LLC 0-3: {cpu}");
            seen.insert(cpu);
        }
        assert!(seen.len() > 1, "it moved");
        assert_eq!(c.migrations, 198, "one move a period from 1125 on");
        // Never within the LLC: every move crosses.
        let model = ConsumerModel::Migrate {
            period_ns: 1000,
            same_llc: 0.0,
        };
        let mut c = Consumers::new(model, &CpuSet::first(8), 7);
        let mut last = c.reader(1, 0, 0, &layout).unwrap();
        for step in 1..50u64 {
            let cpu = c.reader(1, 0, step * 1000 + 999, &layout).unwrap();
            assert!(!layout.shares_llc(cpu, last), "{last} -> {cpu}");
            last = cpu;
        }
    }

    #[test]
    fn hash_and_first_models() {
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let workers: CpuSet = [1, 3].into_iter().collect();
        let mut c = Consumers::new(ConsumerModel::Hash, &workers, 0);
        assert_eq!(c.reader(5, 1, 0, &layout), Some(3));
        assert_eq!(c.reader(6, 1, 0, &layout), Some(1));
        let mut c = Consumers::new(ConsumerModel::First, &workers, 0);
        assert_eq!(c.reader(5, 3, 0, &layout), Some(3));
        assert_eq!(c.reader(5, 1, 9, &layout), Some(3));
        let mut c = Consumers::new(ConsumerModel::Trace, &workers, 0);
        assert_eq!(c.reader(5, 3, 0, &layout), None);
    }
}
