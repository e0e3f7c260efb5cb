//! `steer replay`: replays a trace of flow consumptions through the
//! desired-CPU table and prints how many table writes (steering updates) each
//! rule makes, so one can ask "how many updates would the LLC rule save on my
//! machine?".
//!
//! Input (a file, or stdin when the file is absent or `-`), one event per
//! line, `#` starts a comment:
//!
//! ```text
//! topology pack:2 l3:16 core:8 pu:1   # first event: hwloc synthetic spec
//! table 4096                          # optional, power of two, before any `c`
//! c 0x9e3779b9 3                      # a thread on CPU 3 consumed that flow
//! c 12345 17 allowed=16-31            # ... allowed only on CPUs 16-31
//! off 3                               # CPU 3 goes offline
//! on 3                                # ... and comes back
//! ```
//!
//! Output: one JSON object with `records`, `updates`, `suppressed`,
//! `unchanged` and the writes by reason (`new_or_other_flow`; `changed` under
//! `--policy always`; `forced_offline`, `forced_affinity`, `cross_llc` under
//! `--policy llc`). A bad line exits non-zero with its line number.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::policy::{Policy, RecordOutcome, WriteReason};
use steer_core::table::DesiredCpuTable;

/// Default number of desired-table entries (`table` event).
const DEFAULT_TABLE: usize = 4096;

/// Replays a flow-consumption trace through the desired-CPU table and prints
/// the update counts as JSON.
#[derive(Debug, Args)]
#[command(after_help = "Trace events, one per line, `#` comments:\n  \
        topology <hwloc synthetic spec>   first event, e.g. `topology pack:2 l3:16 core:8 pu:1`\n  \
        table <entries>                   optional, power of two, default 4096, before any `c`\n  \
        c <flow_hash> <cpu> [allowed=<cpulist>]\n                                    \
        a thread on <cpu> consumed the flow (hash: u32, decimal or 0x hex)\n  \
        off <cpu> | on <cpu>              CPU hotplug")]
pub struct ReplayArgs {
    /// The update rule to replay under.
    #[arg(long, value_enum, default_value_t = PolicyArg::Llc)]
    policy: PolicyArg,
    /// Pretty-print the JSON.
    #[arg(long)]
    pretty: bool,
    /// The trace file; stdin when absent or `-`.
    trace: Option<PathBuf>,
}

/// `--policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    /// Write every change (the kernel today).
    Always,
    /// The LLC-affinity rule.
    Llc,
}

impl From<PolicyArg> for Policy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::Always => Policy::Always,
            PolicyArg::Llc => Policy::LlcAffinity,
        }
    }
}

/// One trace event.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// `topology <hwloc synthetic spec>`.
    Topology(String),
    /// `table <entries>`.
    Table(usize),
    /// `c <flow_hash> <cpu> [allowed=<cpulist>]`.
    Consume {
        hash: u32,
        cpu: CpuId,
        allowed: Option<CpuSet>,
    },
    /// `off <cpu>`.
    Off(CpuId),
    /// `on <cpu>`.
    On(CpuId),
}

/// A bad trace line: its 1-based number and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LineError {
    line: usize,
    reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for LineError {}

fn parse_hash(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    };
    match parsed {
        Ok(0) => Err("flow hash 0 means \"no hash\" and cannot be recorded".into()),
        Ok(h) => Ok(h),
        Err(_) => Err(format!(
            "bad flow hash {s:?}: expected a non-zero u32 in decimal or 0x hex"
        )),
    }
}

fn parse_cpu(s: &str) -> Result<CpuId, String> {
    s.parse::<CpuId>()
        .map_err(|_| format!("bad CPU {s:?}: expected a CPU number"))
}

/// Parses one line; `Ok(None)` for blank and comment-only lines.
fn parse_line(line: &str) -> Result<Option<Event>, String> {
    let text = line
        .split_once('#')
        .map_or(line, |(before, _)| before)
        .trim();
    let Some((verb, rest)) = text
        .split_once(char::is_whitespace)
        .map(|(v, r)| (v, r.trim()))
        .or_else(|| (!text.is_empty()).then_some((text, "")))
    else {
        return Ok(None);
    };
    let args: Vec<&str> = rest.split_whitespace().collect();
    let event = match (verb, args.as_slice()) {
        ("topology", []) => return Err("`topology` needs an hwloc synthetic spec".into()),
        ("topology", _) => Event::Topology(rest.to_string()),
        ("table", [n]) => Event::Table(
            n.parse::<usize>()
                .map_err(|_| format!("bad table size {n:?}: expected a power of two"))?,
        ),
        ("c", [hash, cpu, extra @ ..]) => {
            let allowed = match extra {
                [] => None,
                [a] => {
                    let list = a
                        .strip_prefix("allowed=")
                        .ok_or_else(|| format!("unexpected {a:?}: expected `allowed=<cpulist>`"))?;
                    let set = list
                        .parse::<CpuSet>()
                        .map_err(|e| format!("bad allowed list: {e}"))?;
                    if set.is_empty() {
                        return Err("the allowed list is empty".into());
                    }
                    Some(set)
                }
                _ => {
                    return Err("too many fields: `c <flow_hash> <cpu> [allowed=<cpulist>]`".into())
                }
            };
            Event::Consume {
                hash: parse_hash(hash)?,
                cpu: parse_cpu(cpu)?,
                allowed,
            }
        }
        ("off", [cpu]) => Event::Off(parse_cpu(cpu)?),
        ("on", [cpu]) => Event::On(parse_cpu(cpu)?),
        ("table" | "c" | "off" | "on", _) => {
            return Err(format!(
                "wrong fields for `{verb}`: expected `table <entries>`, \
                 `c <flow_hash> <cpu> [allowed=<cpulist>]`, `off <cpu>` or `on <cpu>`"
            ))
        }
        _ => {
            return Err(format!(
                "unknown event {verb:?}: expected topology, table, c, off or on"
            ))
        }
    };
    Ok(Some(event))
}

/// Counts of a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    records: u64,
    unchanged: u64,
    suppressed: u64,
    written: [u64; WriteReason::ALL.len()],
}

impl Counts {
    fn updates(&self) -> u64 {
        self.written.iter().sum()
    }

    fn written(&self, reason: WriteReason) -> u64 {
        self.written[reason as usize]
    }
}

/// The replay over a given CPU layout: the testable core of the tool.
struct Replay {
    layout: Arc<CpuLayout>,
    policy: Policy,
    entries: usize,
    table: Option<DesiredCpuTable>,
    counts: Counts,
}

impl Replay {
    fn new(layout: Arc<CpuLayout>, policy: Policy) -> Self {
        Self {
            layout,
            policy,
            entries: DEFAULT_TABLE,
            table: None,
            counts: Counts::default(),
        }
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<CpuId, String> {
        let n = self.layout.nr_cpus();
        if cpu < n {
            Ok(cpu)
        } else {
            Err(format!(
                "CPU {cpu} is not in the topology (CPUs 0-{})",
                n - 1
            ))
        }
    }

    /// Applies one event (not `topology`, which builds the layout).
    fn apply(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Topology(_) => return Err("only one `topology` line is allowed".into()),
            Event::Table(n) => {
                if self.table.is_some() {
                    return Err("`table` must come before the first `c` event".into());
                }
                // Validate now so the error names this line.
                DesiredCpuTable::new(n, self.layout.nr_cpus()).map_err(|e| e.to_string())?;
                self.entries = n;
            }
            Event::Off(cpu) => self.layout.set_online(self.check_cpu(cpu)?, false),
            Event::On(cpu) => self.layout.set_online(self.check_cpu(cpu)?, true),
            Event::Consume { hash, cpu, allowed } => {
                let cpu = self.check_cpu(cpu)?;
                if let Some(max) = allowed.and_then(|a| a.iter().last()) {
                    self.check_cpu(max)
                        .map_err(|e| format!("allowed list: {e}"))?;
                }
                let allowed = allowed.unwrap_or_else(|| self.layout.online_cpus());
                if self.table.is_none() {
                    let t = DesiredCpuTable::with_policy(
                        self.entries,
                        self.layout.nr_cpus(),
                        self.policy,
                    )
                    .map_err(|e| e.to_string())?;
                    self.table = Some(t);
                }
                let table = self.table.as_ref().ok_or("no table")?;
                let outcome = table
                    .record(hash, cpu, &allowed, &self.layout)
                    .map_err(|e| e.to_string())?;
                self.counts.records += 1;
                match outcome {
                    RecordOutcome::Written(r) => self.counts.written[r as usize] += 1,
                    RecordOutcome::Unchanged => self.counts.unchanged += 1,
                    RecordOutcome::Suppressed => self.counts.suppressed += 1,
                }
            }
        }
        Ok(())
    }

    /// The JSON report.
    fn report(&self) -> Value {
        let c = &self.counts;
        let mut m = Map::new();
        m.insert("policy".into(), json!(self.policy.name()));
        m.insert("cpus".into(), json!(self.layout.nr_cpus()));
        m.insert("llcs".into(), json!(self.layout.nr_llcs()));
        m.insert("table".into(), json!(self.entries));
        m.insert("records".into(), json!(c.records));
        m.insert("updates".into(), json!(c.updates()));
        m.insert("suppressed".into(), json!(c.suppressed));
        m.insert("unchanged".into(), json!(c.unchanged));
        let reasons: &[WriteReason] = match self.policy {
            Policy::Always => &[WriteReason::NewOrOtherFlow, WriteReason::Changed],
            Policy::LlcAffinity => &[
                WriteReason::NewOrOtherFlow,
                WriteReason::ForcedOffline,
                WriteReason::ForcedAffinity,
                WriteReason::CrossLlc,
            ],
        };
        for &r in reasons {
            m.insert(r.name().into(), json!(c.written(r)));
        }
        Value::Object(m)
    }
}

/// Replays a whole trace; `topology` (the first event) is turned into a
/// layout by `make_layout`.
fn replay_lines<R: BufRead>(
    input: R,
    policy: Policy,
    make_layout: impl Fn(&str) -> Result<Arc<CpuLayout>, String>,
) -> anyhow::Result<Value> {
    let mut replay: Option<Replay> = None;
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let err = |reason: String| LineError { line: n, reason };
        let line = line.map_err(|e| err(format!("cannot read: {e}")))?;
        let Some(event) = parse_line(&line).map_err(err)? else {
            continue;
        };
        match (&mut replay, event) {
            (None, Event::Topology(spec)) => {
                replay = Some(Replay::new(make_layout(&spec).map_err(err)?, policy));
            }
            (None, _) => {
                return Err(
                    err("the first event must be `topology <hwloc synthetic spec>`".into()).into(),
                )
            }
            (Some(r), event) => r.apply(event).map_err(err)?,
        }
    }
    let replay = replay.context("the trace has no `topology <hwloc synthetic spec>` line")?;
    Ok(replay.report())
}

fn synthetic_layout(spec: &str) -> Result<Arc<CpuLayout>, String> {
    topology::Topology::synthetic(spec)
        .map(|t| t.layout())
        .map_err(|e| e.to_string())
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let input: Box<dyn Read> = match &args.trace {
        Some(p) if p.as_os_str() != "-" => Box::new(
            std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?,
        ),
        _ => Box::new(std::io::stdin().lock()),
    };
    let report = replay_lines(BufReader::new(input), args.policy.into(), synthetic_layout)?;
    let out = if args.pretty {
        serde_json::to_string_pretty(&report)?
    } else {
        serde_json::to_string(&report)?
    };
    println!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `topology` lines in these tests name a uniform layout: `<cpus>x<per_llc>`.
    fn uniform(spec: &str) -> Result<Arc<CpuLayout>, String> {
        let (n, per) = spec.split_once('x').ok_or("bad test spec")?;
        let (n, per) = (n.parse().map_err(|_| "n")?, per.parse().map_err(|_| "per")?);
        CpuLayout::uniform(n, per)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    }

    fn run(trace: &str, policy: Policy) -> anyhow::Result<Value> {
        replay_lines(trace.as_bytes(), policy, uniform)
    }

    #[test]
    fn parses_events() {
        assert_eq!(parse_line("  # just a comment"), Ok(None));
        assert_eq!(parse_line(""), Ok(None));
        assert_eq!(
            parse_line("c 0x10 3 allowed=0-3 # note"),
            Ok(Some(Event::Consume {
                hash: 16,
                cpu: 3,
                allowed: Some("0-3".parse().unwrap())
            }))
        );
        assert_eq!(
            parse_line("topology pack:2  l3:16 core:8 pu:1"),
            Ok(Some(Event::Topology("pack:2  l3:16 core:8 pu:1".into())))
        );
        assert_eq!(parse_line("table 64"), Ok(Some(Event::Table(64))));
        assert_eq!(parse_line("off 2"), Ok(Some(Event::Off(2))));
        for bad in [
            "c 0 1",
            "c 0x1g 1",
            "c 4294967296 1",
            "c 1",
            "c 1 x",
            "c 1 2 cpus=3",
            "c 1 2 allowed=3-1",
            "c 1 2 allowed=",
            "c 1 2 allowed=1 extra",
            "table",
            "table -4",
            "off",
            "on 1 2",
            "topology",
            "jump 3",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn counts_under_both_policies() {
        // 8 CPUs, LLCs {0-3}, {4-7}.
        let trace = "topology 8x4\n\
                     c 0x100 1\n\
                     c 0x100 1\n\
                     c 0x100 2\n\
                     c 0x100 6\n\
                     c 0x100 6\n";
        let llc = run(trace, Policy::LlcAffinity).unwrap();
        assert_eq!(llc["records"], 5);
        assert_eq!(llc["updates"], 2);
        assert_eq!(llc["suppressed"], 1);
        assert_eq!(llc["unchanged"], 2);
        assert_eq!(llc["new_or_other_flow"], 1);
        assert_eq!(llc["cross_llc"], 1);
        let always = run(trace, Policy::Always).unwrap();
        assert_eq!(always["updates"], 3);
        assert_eq!(always["changed"], 2);
        assert_eq!(always["suppressed"], 0);
        assert!(always.get("cross_llc").is_none());
    }

    #[test]
    fn bad_lines_name_their_number() {
        for (trace, line) in [
            ("c 1 1\n", 1),
            ("topology 4x2\n\nc 1 9\n", 3),
            ("topology 4x2\nc 1 1\ntable 64\n", 3),
            ("topology 4x2\ntable 48\n", 2),
            ("topology 4x2\ntopology 4x2\n", 2),
            ("topology 4x2\nc 1 1 allowed=0-7\n", 2),
            ("topology 4x2\noff 4\n", 2),
            ("# empty\ntopology nonsense\n", 2),
        ] {
            let err = run(trace, Policy::LlcAffinity).unwrap_err();
            let le = err.downcast_ref::<LineError>().expect("a line error");
            assert_eq!(le.line, line, "{trace:?}: {le}");
        }
        assert!(run("# nothing\n", Policy::Always).is_err());
    }

    #[test]
    fn offline_and_affinity_reasons() {
        let trace = "topology 8x4\n\
                     c 7 1\n\
                     off 1\n\
                     c 7 2          # forced_offline\n\
                     on 1\n\
                     c 7 3 allowed=3 # forced_affinity (2 not allowed)\n\
                     c 7 0          # suppressed\n";
        let r = run(trace, Policy::LlcAffinity).unwrap();
        assert_eq!(r["forced_offline"], 1);
        assert_eq!(r["forced_affinity"], 1);
        assert_eq!(r["suppressed"], 1);
        assert_eq!(r["updates"], 3);
    }
}
