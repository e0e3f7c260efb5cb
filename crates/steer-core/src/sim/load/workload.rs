//! The workload of the load model: flows with a packet rate, a per-packet
//! cost and a placement (by hash, pinned, or consumed by an application
//! thread on a CPU), written out or generated (Zipf sizes, elephants), and
//! the text format `steer balance-sim` reads.
//!
//! Format: one item per line, `#` starts a comment, `key=value` options:
//!
//! ```text
//! flow rate=<pps> cost=<ns> [hash=<u32>] [pin=<cpu> | app=<cpu>]
//! zipf flows=<n> s=<exponent> [max=<largest size>] [pps=<total>] [cost=<ns>|<lo>-<hi>]
//! zipf-rank flows=<n> s=<exponent> [pps=<total>] [cost=...]
//! uniform flows=<n> [pps=<total>] [cost=...]
//! elephants flows=<n> share=<fraction of all work, each> [cost=...]
//! ```
//!
//! - `zipf`: each flow's size is drawn from the discrete Zipf law on
//!   `1..=max` (P(k) proportional to k^-s, default max 10000): many small
//!   flows, a heavy tail of big ones.
//! - `zipf-rank`: the rank-size law: the i-th flow's size is proportional
//!   to i^-s (for s near 1 the first flow alone carries about a tenth of
//!   everything).
//! - `elephants`: flows that each carry `share` of the whole workload's
//!   work (rate times cost), added after everything else.
//! - `pps` is a group's total packet rate (default 1,000,000); `cost` a
//!   fixed per-packet cost or a range each flow draws from uniformly
//!   (default 1000 ns). The model may rescale every rate to a target load.
//!
//! Invariants: the same text and seed give the same flows; every flow has a
//! non-zero hash, a finite rate >= 0 and a cost > 0.

use std::fmt;

use crate::cpu::CpuId;
use crate::sim::consumer::SplitMix;

/// Where a flow's packets are processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Wherever its hash puts it (RPS), and wherever the balancer moves it.
    Hash,
    /// Explicitly pinned to a CPU (`Pins`): never moved.
    Pin(CpuId),
    /// Consumed by an application thread on a CPU (a recorded desired
    /// CPU): never moved by the balancer.
    App(CpuId),
}

/// One flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSpec {
    /// Its hash (non-zero).
    pub hash: u32,
    /// Packets per second.
    pub rate_pps: f64,
    /// CPU time to handle one of its packets (ns).
    pub cost_ns: f64,
    /// Where it is processed.
    pub placement: Placement,
}

/// A set of flows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// The flows.
    pub flows: Vec<FlowSpec>,
}

/// Why a workload text was refused: the line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    /// 1-based line number (0: not from a text).
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.what)
        } else {
            f.write_str(&self.what)
        }
    }
}

impl std::error::Error for WorkloadError {}

/// A per-packet cost: fixed, or drawn per flow from a range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    /// Every flow's packets cost this (ns).
    Fixed(f64),
    /// Each flow draws its cost uniformly from `lo..=hi` (ns).
    Range(f64, f64),
}

impl Default for Cost {
    fn default() -> Self {
        Self::Fixed(1000.0)
    }
}

impl Cost {
    fn draw(self, rng: &mut SplitMix) -> f64 {
        match self {
            Self::Fixed(c) => c,
            Self::Range(lo, hi) => lo + (hi - lo) * rng.unit(),
        }
    }
}

impl std::str::FromStr for Cost {
    type Err = String;

    /// `<ns>` or `<lo>-<hi>` (ns, > 0).
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| -> Result<f64, String> {
            match x.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(format!("bad cost {s:?}: expected ns > 0, or <lo>-<hi>")),
            }
        };
        match s.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("bad cost {s:?}: {lo} > {hi}"));
                }
                Ok(Self::Range(lo, hi))
            }
            None => Ok(Self::Fixed(num(s)?)),
        }
    }
}

/// Default total packet rate of a generated group.
const GROUP_PPS: f64 = 1_000_000.0;
/// Default largest size of `zipf`.
const ZIPF_MAX: u64 = 10_000;
/// Largest flow count one line may ask for.
const MAX_FLOWS: usize = 10_000_000;

impl Workload {
    /// `count` flows whose sizes follow the discrete Zipf law with exponent
    /// `s` on `1..=max`, `pps` packets per second in all, costs from `cost`,
    /// placed by hash.
    ///
    /// ```
    /// use steer_core::sim::load::{Cost, Workload};
    /// let w = Workload::zipf(1000, 1.1, 10_000, 1e6, Cost::Fixed(500.0), 7);
    /// assert_eq!(w.flows.len(), 1000);
    /// let total: f64 = w.flows.iter().map(|f| f.rate_pps).sum();
    /// assert!((total - 1e6).abs() < 1e-3);
    /// ```
    pub fn zipf(count: usize, s: f64, max: u64, pps: f64, cost: Cost, seed: u64) -> Self {
        let mut rng = SplitMix::new(seed ^ 0x5a1f_0000);
        let max = max.max(1);
        // The law's cumulative weights, for inversion by binary search.
        let mut cdf = Vec::with_capacity(max as usize);
        let mut acc = 0.0;
        for k in 1..=max {
            acc += (k as f64).powf(-s);
            cdf.push(acc);
        }
        let sizes: Vec<f64> = (0..count)
            .map(|_| {
                let x = rng.unit() * acc;
                (cdf.partition_point(|&c| c < x) + 1) as f64
            })
            .collect();
        Self::from_sizes(&sizes, pps, cost, &mut rng)
    }

    /// `count` flows of the rank-size law: the i-th (from 1) has a size
    /// proportional to `i^-s`; `pps` packets per second in all.
    pub fn zipf_rank(count: usize, s: f64, pps: f64, cost: Cost, seed: u64) -> Self {
        let mut rng = SplitMix::new(seed ^ 0x2a4c_0000);
        let sizes: Vec<f64> = (1..=count).map(|i| (i as f64).powf(-s)).collect();
        Self::from_sizes(&sizes, pps, cost, &mut rng)
    }

    /// `count` flows of equal rate, `pps` in all.
    pub fn uniform(count: usize, pps: f64, cost: Cost, seed: u64) -> Self {
        let mut rng = SplitMix::new(seed ^ 0x0417_0000);
        Self::from_sizes(&vec![1.0; count], pps, cost, &mut rng)
    }

    fn from_sizes(sizes: &[f64], pps: f64, cost: Cost, rng: &mut SplitMix) -> Self {
        let total: f64 = sizes.iter().sum();
        let flows = sizes
            .iter()
            .map(|&size| FlowSpec {
                hash: nonzero_hash(rng),
                rate_pps: if total > 0.0 { pps * size / total } else { 0.0 },
                cost_ns: cost.draw(rng),
                placement: Placement::Hash,
            })
            .collect();
        Self { flows }
    }

    /// Adds `count` elephants, each carrying `share` of the whole
    /// workload's work (rate times cost) once added; `count * share` must
    /// be below 1.
    pub fn add_elephants(
        &mut self,
        count: usize,
        share: f64,
        cost: Cost,
        seed: u64,
    ) -> Result<(), WorkloadError> {
        let all = count as f64 * share;
        if !(share > 0.0 && all < 1.0) {
            return Err(WorkloadError {
                line: 0,
                what: format!(
                    "elephants: {count} x share {share} must be above 0 and below 1 in all"
                ),
            });
        }
        let others = self.work();
        // e = share * (others + count * e)
        let each = if others > 0.0 {
            share * others / (1.0 - all)
        } else {
            1e9
        };
        let mut rng = SplitMix::new(seed ^ 0xe1e0_0000);
        for _ in 0..count {
            let cost_ns = cost.draw(&mut rng);
            self.flows.push(FlowSpec {
                hash: nonzero_hash(&mut rng),
                rate_pps: each / cost_ns,
                cost_ns,
                placement: Placement::Hash,
            });
        }
        Ok(())
    }

    /// The CPU time all flows ask for per second (ns/s: 1e9 is one CPU).
    pub fn work(&self) -> f64 {
        self.flows.iter().map(|f| f.rate_pps * f.cost_ns).sum()
    }

    /// Multiplies every rate so the workload asks for `cpus` CPUs' worth of
    /// work (e.g. 0.6 times the worker count).
    pub fn scale_to(&mut self, cpus: f64) {
        let work = self.work();
        if work > 0.0 {
            let k = cpus * 1e9 / work;
            for f in &mut self.flows {
                f.rate_pps *= k;
            }
        }
    }

    /// Parses the text format (module docs); generated groups draw from
    /// `seed` (each line its own stream, so adding a line leaves the others
    /// alone).
    ///
    /// ```
    /// use steer_core::sim::load::{Placement, Workload};
    /// let w = Workload::parse(
    ///     "# two groups and a pinned flow\n\
    ///      zipf flows=100 s=1.1\n\
    ///      elephants flows=2 share=0.1\n\
    ///      flow rate=5000 cost=800 pin=1\n",
    ///     1,
    /// ).unwrap();
    /// assert_eq!(w.flows.len(), 103);
    /// // Elephants come last: their share is of everything else too.
    /// assert_eq!(w.flows[100].placement, Placement::Pin(1));
    /// assert!(Workload::parse("zipf flows=10", 1).unwrap_err().to_string().contains("line 1"));
    /// ```
    pub fn parse(text: &str, seed: u64) -> Result<Self, WorkloadError> {
        let mut w = Workload::default();
        let mut elephants = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            if body.is_empty() {
                continue;
            }
            let line_seed = seed.wrapping_add((line as u64).wrapping_mul(0x9E37_79B9));
            parse_line(body, line_seed, &mut w, &mut elephants)
                .map_err(|what| WorkloadError { line, what })?;
            if let Some(e) = elephants.last_mut().filter(|e| e.0 == 0) {
                e.0 = line;
            }
        }
        for (line, flows, share, cost, seed) in elephants {
            w.add_elephants(flows, share, cost, seed)
                .map_err(|e| WorkloadError { line, what: e.what })?;
        }
        Ok(w)
    }
}

/// An `elephants` line, resolved once every other flow is known:
/// (line, flows, share, cost, seed).
type ElephantLine = (usize, usize, f64, Cost, u64);

fn parse_line(
    body: &str,
    seed: u64,
    w: &mut Workload,
    elephants: &mut Vec<ElephantLine>,
) -> Result<(), String> {
    let mut words = body.split_whitespace();
    let kind = words.next().unwrap_or("");
    let opts = Options::parse(words)?;
    match kind {
        "flow" => {
            opts.only(&["rate", "cost", "hash", "pin", "app"])?;
            let rate: f64 = opts.num("rate")?.ok_or("flow needs rate=<pps>")?;
            let cost: f64 = opts.num("cost")?.unwrap_or(1000.0);
            if !(rate.is_finite() && rate >= 0.0 && cost.is_finite() && cost > 0.0) {
                return Err("rate must be >= 0 and cost > 0".into());
            }
            let hash = match opts.get("hash") {
                Some(h) => parse_hash(h)
                    .ok_or_else(|| format!("bad hash {h:?}: expected a non-zero u32"))?,
                None => nonzero_hash(&mut SplitMix::new(seed)),
            };
            let placement = match (opts.num::<CpuId>("pin")?, opts.num::<CpuId>("app")?) {
                (Some(_), Some(_)) => {
                    return Err("a flow is pinned or consumed by an app, not both".into())
                }
                (Some(c), None) => Placement::Pin(c),
                (None, Some(c)) => Placement::App(c),
                (None, None) => Placement::Hash,
            };
            w.flows.push(FlowSpec {
                hash,
                rate_pps: rate,
                cost_ns: cost,
                placement,
            });
        }
        "zipf" | "zipf-rank" | "uniform" => {
            let allowed: &[&str] = match kind {
                "zipf" => &["flows", "s", "max", "pps", "cost"],
                "zipf-rank" => &["flows", "s", "pps", "cost"],
                _ => &["flows", "pps", "cost"],
            };
            opts.only(allowed)?;
            let flows = opts.count("flows")?;
            let pps: f64 = opts.num("pps")?.unwrap_or(GROUP_PPS);
            if !(pps.is_finite() && pps >= 0.0) {
                return Err("pps must be >= 0".into());
            }
            let cost = opts.cost()?;
            let group = if kind == "uniform" {
                Workload::uniform(flows, pps, cost, seed)
            } else {
                let s: f64 = opts
                    .num("s")?
                    .ok_or_else(|| format!("{kind} needs s=<exponent>"))?;
                if !(s.is_finite() && s > 0.0) {
                    return Err("s must be > 0".into());
                }
                if kind == "zipf" {
                    let max: u64 = opts.num("max")?.unwrap_or(ZIPF_MAX);
                    if !(1..=10_000_000).contains(&max) {
                        return Err("max must be 1 to 10000000".into());
                    }
                    Workload::zipf(flows, s, max, pps, cost, seed)
                } else {
                    Workload::zipf_rank(flows, s, pps, cost, seed)
                }
            };
            w.flows.extend(group.flows);
        }
        "elephants" => {
            opts.only(&["flows", "share", "cost"])?;
            let flows = opts.count("flows")?;
            let share: f64 = opts
                .num("share")?
                .ok_or("elephants needs share=<fraction>")?;
            // The line number is filled in by the caller.
            elephants.push((0, flows, share, opts.cost()?, seed));
        }
        other => {
            return Err(format!(
                "unknown item {other:?}: expected flow, zipf, zipf-rank, uniform or elephants"
            ))
        }
    }
    Ok(())
}

fn nonzero_hash(rng: &mut SplitMix) -> u32 {
    loop {
        let h = rng.next_u64() as u32;
        if h != 0 {
            return h;
        }
    }
}

fn parse_hash(s: &str) -> Option<u32> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
        None => s.parse().ok()?,
    };
    (v != 0).then_some(v)
}

/// A line's `key=value` options.
struct Options<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Options<'a> {
    fn parse(words: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        let mut v = Vec::new();
        for w in words {
            let (k, val) = w
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got {w:?}"))?;
            if v.iter().any(|(key, _)| *key == k) {
                return Err(format!("{k} given twice"));
            }
            v.push((k, val));
        }
        Ok(Self(v))
    }

    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        match self.0.iter().find(|(k, _)| !allowed.contains(k)) {
            Some((k, _)) => Err(format!(
                "unknown option {k:?} (expected {})",
                allowed.join(", ")
            )),
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn num<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, String> {
        self.get(key)
            .map(|v| v.parse::<T>().map_err(|_| format!("bad {key}={v}")))
            .transpose()
    }

    fn count(&self, key: &str) -> Result<usize, String> {
        match self.num::<usize>(key)? {
            Some(n) if (1..=MAX_FLOWS).contains(&n) => Ok(n),
            Some(n) => Err(format!("{key}={n}: expected 1 to {MAX_FLOWS}")),
            None => Err(format!("needs {key}=<n>")),
        }
    }

    fn cost(&self) -> Result<Cost, String> {
        self.get("cost").map_or(Ok(Cost::default()), str::parse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_sizes_have_a_heavy_tail_and_many_mice() {
        let w = Workload::zipf(10_000, 1.1, 10_000, 1e6, Cost::Fixed(1000.0), 3);
        let mut rates: Vec<f64> = w.flows.iter().map(|f| f.rate_pps).collect();
        rates.sort_by(f64::total_cmp);
        let smallest = rates[0];
        // The most common size is the smallest; the median is a few dozen
        // times it (P(k) ~ k^-1.1 puts half the mass below k ~ 25).
        assert!(rates[1_000] == smallest);
        assert!(
            rates[5_000] <= 60.0 * smallest,
            "{} vs {smallest}",
            rates[5_000]
        );
        // The biggest is thousands of times the smallest.
        assert!(rates[9_999] > 1000.0 * smallest);
        // Same seed, same flows.
        assert_eq!(
            w,
            Workload::zipf(10_000, 1.1, 10_000, 1e6, Cost::Fixed(1000.0), 3)
        );
    }

    #[test]
    fn elephants_carry_their_share_of_all_work() {
        let mut w = Workload::uniform(100, 1e6, Cost::Fixed(1000.0), 1);
        w.add_elephants(2, 0.2, Cost::Fixed(500.0), 1).unwrap();
        let total = w.work();
        for e in &w.flows[100..] {
            assert!((e.rate_pps * e.cost_ns / total - 0.2).abs() < 1e-9);
        }
        assert!(w.add_elephants(5, 0.2, Cost::default(), 1).is_err());
    }

    #[test]
    fn scaling_sets_the_total_work() {
        let mut w = Workload::zipf_rank(50, 1.0, 1e5, Cost::Range(500.0, 1500.0), 9);
        w.scale_to(3.0);
        assert!((w.work() - 3e9).abs() < 1.0);
        assert!(w
            .flows
            .iter()
            .all(|f| (500.0..=1500.0).contains(&f.cost_ns)));
    }

    #[test]
    fn bad_lines_say_where_and_why() {
        for (text, needle) in [
            ("flow cost=5", "rate"),
            ("flow rate=1 pin=1 app=2", "not both"),
            ("zipf flows=0 s=1", "1 to"),
            ("zipf flows=3 s=1 color=red", "unknown option"),
            ("uniform flows=3 cost=9-2", "9 > 2"),
            ("\n\nmice flows=2", "line 3"),
            ("elephants flows=4 share=0.3", "below 1"),
            ("flow rate=1 hash=0", "non-zero"),
            ("flow rate=1 rate=2", "twice"),
        ] {
            let e = Workload::parse(text, 1).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
