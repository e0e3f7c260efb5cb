//! `steer balance-sim`: the load model (`steer_core::sim::load`) on a
//! workload, for each worker count asked: plain hash placement against the
//! load balancer, on the same arrivals.
//!
//! Input: a workload file (the format of `steer_core::sim::load::Workload`),
//! or one generated from the flags (`--zipf`, `--zipf-rank`, `--uniform`,
//! with `--elephants`), `--flows` flows in all or 100 per worker. The
//! machine: the worker CPUs `0..n` in LLCs of `--llc-size` CPUs.
//!
//! Output: one JSON object per worker count in a JSON array (or a table with
//! `--table`). A bad file line exits non-zero with its number.
//!
//! This module parses and prints; every decision is steer-core's.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use steer_core::balance::BalanceConfig;
use steer_core::cpu::{CpuLayout, CpuSet};
use steer_core::runtime::RpsMode;
use steer_core::sim::load::{run_pair, Cost, LoadConfig, LoadReport, Workload};

use crate::args::Rps;

/// Models worker load under hash placement and under the balancer.
#[derive(Debug, Args)]
#[command(after_help = "Workload file, one item per line, `#` comments:\n  \
    flow rate=<pps> cost=<ns> [hash=<u32>] [pin=<cpu> | app=<cpu>]\n  \
    zipf flows=<n> s=<exp> [max=<size>] [pps=<total>] [cost=<ns>|<lo>-<hi>]\n  \
    zipf-rank flows=<n> s=<exp> [pps=<total>] [cost=...]\n  \
    uniform flows=<n> [pps=<total>] [cost=...]\n  \
    elephants flows=<n> share=<fraction of all work, each> [cost=...]\n\n\
    Examples:\n  \
    steer balance-sim --workers 2,8,64 --zipf 1.1 --table\n  \
    steer balance-sim --workers 64 --uniform --elephants 4:0.03 --cost 500-2000\n  \
    steer balance-sim --workers 8 --load 0 flows.txt")]
pub struct BalanceSimArgs {
    /// Worker counts to model (workers on CPUs 0..n), e.g. `2,8,64`.
    #[arg(long, value_delimiter = ',', default_value = "2,8,64")]
    workers: Vec<usize>,
    /// CPUs per LLC in the modelled machine.
    #[arg(long, default_value_t = 8)]
    llc_size: usize,
    /// Generate flows whose sizes follow the Zipf law with this exponent on
    /// 1..=--zipf-max (the default workload: --zipf 1.1).
    #[arg(long, conflicts_with_all = ["zipf_rank", "uniform"])]
    zipf: Option<f64>,
    /// Largest size --zipf draws.
    #[arg(long, default_value_t = 10_000)]
    zipf_max: u64,
    /// Generate flows of the rank-size law: the i-th flow's size is
    /// proportional to i^-S.
    #[arg(long, value_name = "S", conflicts_with = "uniform")]
    zipf_rank: Option<f64>,
    /// Generate flows of equal size.
    #[arg(long)]
    uniform: bool,
    /// Add elephants: COUNT flows each carrying SHARE of all work
    /// (`COUNT:SHARE`, e.g. `4:0.03`).
    #[arg(long, value_name = "COUNT:SHARE")]
    elephants: Option<String>,
    /// Generated flows in all (default: 100 per worker).
    #[arg(long)]
    flows: Option<usize>,
    /// Per-packet cost of generated flows: ns, or a range `LO-HI` each flow
    /// draws from.
    #[arg(long, default_value = "1000")]
    cost: Cost,
    /// Scale the rates so the mean worker load is this fraction of a CPU;
    /// 0 keeps the workload's rates.
    #[arg(long, default_value_t = 0.6)]
    load: f64,
    /// Where a new flow bucket starts: `local` (one rx queue per worker, the
    /// NIC's RSS) or `spread` (RPS over the workers by hash).
    #[arg(long, value_enum, default_value = "local")]
    rps: Rps,
    /// Rx queues (default: one per worker).
    #[arg(long)]
    queues: Option<usize>,
    /// Simulated seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds before the report's window starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Milliseconds between two balancer rounds.
    #[arg(long, default_value_t = 5.0)]
    interval_ms: f64,
    /// Fraction of the flows that end and are replaced by new ones per
    /// second.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// Exact fluid arrivals instead of Poisson ones.
    #[arg(long)]
    no_noise: bool,
    /// The balancer acts when a worker is this fraction above the mean.
    #[arg(long, default_value_t = BalanceConfig::default().trigger)]
    trigger: f64,
    /// Rounds a moved unit stays put.
    #[arg(long, default_value_t = BalanceConfig::default().cooldown_rounds)]
    cooldown_rounds: u32,
    /// Moves per round at most.
    #[arg(long, default_value_t = BalanceConfig::default().max_moves)]
    max_moves: usize,
    /// Weight of the newest round in the balancer's smoothed loads (1: none).
    #[arg(long, default_value_t = BalanceConfig::default().smoothing)]
    smoothing: f64,
    /// A move must lower the pair's larger load by this fraction of the mean.
    #[arg(long, default_value_t = BalanceConfig::default().min_gain)]
    min_gain: f64,
    /// Rounds the two workers of a move sit out.
    #[arg(long, default_value_t = BalanceConfig::default().settle_rounds)]
    settle_rounds: u32,
    /// Seed of the generated flows, arrivals and churn.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print a table instead of JSON.
    #[arg(long)]
    table: bool,
    /// Pretty-print the JSON.
    #[arg(long)]
    pretty: bool,
    /// Include each worker's load in the JSON.
    #[arg(long)]
    per_worker: bool,
    /// A workload file (instead of the generator flags).
    workload: Option<PathBuf>,
}

impl BalanceSimArgs {
    fn workload(&self, workers: usize, file: Option<&str>) -> anyhow::Result<Workload> {
        let mut w = match file {
            Some(text) => Workload::parse(text, self.seed)?,
            None => {
                let n = self.flows.unwrap_or(100 * workers).max(1);
                let pps = 1e6;
                if self.uniform {
                    Workload::uniform(n, pps, self.cost, self.seed)
                } else if let Some(s) = self.zipf_rank {
                    Workload::zipf_rank(n, s, pps, self.cost, self.seed)
                } else {
                    let s = self.zipf.unwrap_or(1.1);
                    Workload::zipf(n, s, self.zipf_max, pps, self.cost, self.seed)
                }
            }
        };
        if let Some(spec) = &self.elephants {
            let (count, share) = spec
                .split_once(':')
                .and_then(|(c, s)| Some((c.parse().ok()?, s.parse().ok()?)))
                .with_context(|| format!("--elephants {spec:?}: expected COUNT:SHARE"))?;
            w.add_elephants(count, share, self.cost, self.seed)?;
        }
        Ok(w)
    }

    fn config(&self, workers: usize) -> anyhow::Result<LoadConfig> {
        let secs = |s: f64, what: &str| -> anyhow::Result<u64> {
            anyhow::ensure!(s.is_finite() && s >= 0.0, "{what} must be >= 0");
            Ok((s * 1e9) as u64)
        };
        Ok(LoadConfig {
            workers: CpuSet::first(workers),
            queues: self.queues.unwrap_or(0),
            rps: match self.rps {
                Rps::Spread => RpsMode::Spread,
                Rps::Local | Rps::Auto => RpsMode::Local,
            },
            duration_ns: secs(self.duration, "--duration")?,
            warmup_ns: secs(self.warmup, "--warmup")?,
            load: (self.load > 0.0).then_some(self.load),
            interval_ns: secs(self.interval_ms / 1e3, "--interval-ms")?,
            churn_per_s: self.churn,
            poisson: !self.no_noise,
            seed: self.seed,
            ..LoadConfig::default()
        })
    }

    fn balance(&self) -> BalanceConfig {
        BalanceConfig {
            trigger: self.trigger,
            cooldown_rounds: self.cooldown_rounds,
            max_moves: self.max_moves,
            smoothing: self.smoothing,
            min_gain: self.min_gain,
            settle_rounds: self.settle_rounds,
            ..BalanceConfig::default()
        }
    }
}

/// One worker count's result.
struct Row {
    workers: usize,
    hash: LoadReport,
    balanced: LoadReport,
}

pub fn run(args: &BalanceSimArgs) -> anyhow::Result<()> {
    let text = match &args.workload {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    anyhow::ensure!(
        args.workers
            .iter()
            .all(|&n| (1..=steer_core::cpu::MAX_CPUS).contains(&n)),
        "--workers: each count must be 1 to {}",
        steer_core::cpu::MAX_CPUS
    );
    let mut rows = Vec::new();
    for &n in &args.workers {
        let workload = args
            .workload(n, text.as_deref())
            .with_context(|| match &args.workload {
                Some(p) => p.display().to_string(),
                None => "the generated workload".into(),
            })?;
        let layout = Arc::new(CpuLayout::uniform(n, args.llc_size.max(1))?);
        let (hash, balanced) = run_pair(&args.config(n)?, args.balance(), &workload, layout)?;
        rows.push(Row {
            workers: n,
            hash,
            balanced,
        });
    }
    if args.table {
        print!("{}", table(&rows));
    } else {
        let v = Value::Array(rows.iter().map(|r| row_json(r, args.per_worker)).collect());
        let out = if args.pretty {
            serde_json::to_string_pretty(&v)?
        } else {
            serde_json::to_string(&v)?
        };
        println!("{out}");
    }
    Ok(())
}

fn report_json(r: &LoadReport, per_worker: bool) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Value::Object(m) = &mut v {
        m.remove("balancer");
        if !per_worker {
            m.remove("per_worker");
        }
    }
    v
}

fn row_json(r: &Row, per_worker: bool) -> Value {
    json!({
        "workers": r.workers,
        "hash_only": report_json(&r.hash, per_worker),
        "balancer": report_json(&r.balanced, per_worker),
    })
}

fn table(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:<9} {:>8} {:>6} {:>8} {:>9} {:>10} {:>9} {:>9} {:>7} {:>9}",
        "workers",
        "placement",
        "max/mean",
        "bound",
        "moves/s",
        "flows%/s",
        "steady%/s",
        "wait_us",
        "worst_us",
        "drop%",
        "elephants"
    );
    let us = |x: Option<f64>| x.map_or("sat".to_string(), |v| format!("{v:.1}"));
    for row in rows {
        for (name, r) in [("hash", &row.hash), ("balancer", &row.balanced)] {
            let _ = writeln!(
                out,
                "{:>7} {:<9} {:>8.3} {:>6.2} {:>8.1} {:>9.3} {:>10.3} {:>9} {:>9} {:>7.3} {:>9}",
                row.workers,
                name,
                r.max_over_mean,
                r.bound,
                r.moves_per_s,
                r.moved_flows_pct_per_s,
                r.window_moved_flows_pct_per_s,
                us(r.queue_delay_us),
                us(r.worst_queue_delay_us),
                r.dropped_pct,
                r.elephants,
            );
        }
    }
    out
}
