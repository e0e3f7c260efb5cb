//! `steer replay`: replays traffic through steer's whole steering decision
//! (`steer_core::sim`: the desired-CPU table under the update rule, the
//! per-rx-queue tables with `last_qtail`, the steering hook, the fast path,
//! the rings draining) and prints how many steering updates each rule
//! makes, so one can ask "how many updates would the LLC rule save on my
//! traffic, on my machine?".
//!
//! Input: a text trace (`steer_replay::trace`: a file, or stdin when the
//! file is absent or `-` and no capture is given), a pcap/pcapng capture
//! (`--pcap`, `steer_replay::packets`), or both (the trace's events merged into the
//! capture by time). Who consumes the flows: the trace's `c` events, or a
//! `--consumer` model. The machine: the trace's `topology`/`llcs` line or
//! `--topology` (live, an hwloc synthetic spec, or an XML export).
//!
//! Output: one JSON object (or a short table with `--table`). A trace with
//! consumption events only (today's format) gives exactly today's object:
//! `records`, `updates`, `suppressed`, `unchanged` and the writes by reason.
//! With packets, the object also has the steering updates (hook calls)
//! and the dispatch counts; `--policy both` replays under both rules and
//! adds what the LLC rule saved. A bad line exits non-zero with its number.
//!
//! This module drives and prints; reading its inputs is steer-replay's,
//! every decision steer-core's.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use steer_core::cpu::{CpuId, CpuLayout, CpuSet, LlcId};
use steer_core::flow::{FlowHasher, ToeplitzHasher};
use steer_core::policy::{Policy, WriteReason};
use steer_core::runtime::RpsMode;
use steer_core::sim::{ConsumerModel, Event as SimEvent, Sim, SimConfig, SimReport};
use steer_core::table::DesiredCpuTable;
use steer_topology::Topology;

use crate::args::{OnOff, Rps};
use steer_replay::packets::{self, PathError, PcapStats};
use steer_replay::trace::{self, EngineLine, Event, Flow, LineError};

/// Default desired-table slots for a trace without a `table` line.
const DEFAULT_TABLE: usize = 4096;
/// Default desired-table slots for a capture (the engine's default).
const DEFAULT_TABLE_PCAP: usize = 65536;
/// Default rx-table buckets (the `steer` commands' engine setting).
const DEFAULT_RX_TABLE: usize = 4096;
/// Entries of the simulated NIC's RSS indirection table.
const RETA: u32 = 128;

/// Replays traffic through steer's steering decision and prints the update
/// counts as JSON.
#[derive(Debug, Args)]
#[command(
    after_help = "Trace events, one per line, `#` comments, `t=<ns>` optional on c, p, off, on:\n  \
        topology <hwloc synthetic spec>   the machine, e.g. `topology pack:2 l3:16 core:8 pu:1`\n  \
        llcs <cpulist> <cpulist>...       ... or its LLCs, one CPU list each\n  \
        table <entries>                   desired-table slots, power of two, default 4096\n  \
        engine workers=<cpulist> queues=<n> rps=local|spread fast_path=on|off rx_table=<n> ring=<n> idle_ms=<n>\n  \
        c <flow> <cpu> [allowed=<cpulist>]  a thread on <cpu> consumed the flow\n  \
        p <flow> <rxq>                    a packet of the flow arrived on rx queue <rxq>\n  \
        off <cpu> | on <cpu>              CPU hotplug\n\
        A flow is a non-zero u32 hash (decimal or 0x hex) or udp|tcp/<src>:<port>/<dst>:<port>.\n\n\
        Examples:\n  \
        steer replay --policy llc trace.txt\n  \
        steer replay --policy both --table recorded.trace\n  \
        steer replay --policy both --pcap dns.pcap --port 53 --consumer migrate:10 --topology live"
)]
pub struct ReplayArgs {
    /// The update rule to replay under; `both` replays under each and says
    /// what the LLC rule saves.
    #[arg(long, value_enum, default_value_t = PolicyArg::Llc)]
    policy: PolicyArg,
    /// Pretty-print the JSON.
    #[arg(long)]
    pretty: bool,
    /// Print a short table instead of JSON.
    #[arg(long)]
    table: bool,
    /// Packets from a pcap or pcapng capture (times from the capture, rx
    /// queues by the NIC's RSS: Toeplitz with the usual key, an even
    /// 128-entry indirection table).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Only packets to these UDP/TCP destination ports (repeatable; default:
    /// every IP packet of the capture).
    #[arg(long)]
    port: Vec<u16>,
    /// Who consumes the flows: `trace` (the trace's `c` events), `hash`
    /// (flow on worker CPU hash % n), `first` (where its first packet was
    /// handled), `migrate:<ms>[:<same_llc_fraction>]` (tokio-like threads
    /// moving every <ms>, within their LLC with that probability, default
    /// 0.9). Default: trace.
    #[arg(long)]
    consumer: Option<ConsumerModel>,
    /// The machine: `live`, an hwloc synthetic spec, or an XML export
    /// (`lstopo --of xml`); overrides the trace's (default: the trace's,
    /// else live).
    #[arg(long)]
    topology: Option<String>,
    /// Worker CPUs (default: the trace's `engine workers=`, else every
    /// online CPU).
    #[arg(long, value_parser = crate::args::cpu_list)]
    cpus: Option<CpuSet>,
    /// Rx queues (default: the trace's, else one per worker CPU).
    #[arg(long)]
    queues: Option<usize>,
    /// Where flows go before anything is learned.
    #[arg(long, value_enum, default_value = "auto")]
    rps: Rps,
    /// The same-CPU fast path (default: the trace's, else on).
    #[arg(long, value_enum)]
    fast_path: Option<OnOff>,
    /// Desired-table slots (default: the trace's `table`, else 4096 for a
    /// trace, 65536 for a capture).
    #[arg(long)]
    flow_table: Option<usize>,
    /// Buckets of each rx-queue table (default: the trace's, else 4096).
    #[arg(long)]
    rx_table: Option<usize>,
    /// Slots of each ring (default: the trace's, else 1024).
    #[arg(long)]
    ring_size: Option<usize>,
    /// CPU time to handle one packet, in ns (the queue model).
    #[arg(long, default_value_t = 1000)]
    service_ns: u64,
    /// A flow idle this long (ms) loses its rx-table entry and steering
    /// state; 0: never (default: the trace's, else 10000).
    #[arg(long)]
    flow_idle_ms: Option<u32>,
    /// Seed of the random consumer models.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace file; stdin when absent or `-` (with `--pcap`: none when
    /// absent).
    trace: Option<PathBuf>,
}

/// `--policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    /// Write every change (the kernel today).
    Always,
    /// The LLC-affinity rule.
    Llc,
    /// Both, side by side.
    Both,
}

impl PolicyArg {
    fn policies(self) -> Vec<Policy> {
        match self {
            Self::Always => vec![Policy::Always],
            Self::Llc => vec![Policy::LlcAffinity],
            Self::Both => vec![Policy::Always, Policy::LlcAffinity],
        }
    }
}

/// The replay's settings, resolved from the flags (the trace may fill in
/// what they leave open).
#[derive(Debug, Clone)]
struct Options {
    policies: Vec<Policy>,
    /// `--topology`, loaded, and its name.
    topology: Option<(Arc<CpuLayout>, String)>,
    cpus: Option<CpuSet>,
    queues: Option<usize>,
    rps: Rps,
    fast_path: Option<bool>,
    flow_table: Option<usize>,
    rx_table: Option<usize>,
    ring: Option<usize>,
    service_ns: u64,
    flow_idle_ms: Option<u32>,
    consumer: Option<ConsumerModel>,
    seed: u64,
    capture: bool,
}

impl Options {
    fn new(policies: Vec<Policy>) -> Self {
        Self {
            policies,
            topology: None,
            cpus: None,
            queues: None,
            rps: Rps::Auto,
            fast_path: None,
            flow_table: None,
            rx_table: None,
            ring: None,
            service_ns: 1000,
            flow_idle_ms: None,
            consumer: None,
            seed: 1,
            capture: false,
        }
    }
}

/// A copy of `l` (LLC map and online state) for one simulation.
fn copy_layout(l: &CpuLayout) -> Result<Arc<CpuLayout>, String> {
    let copy = CpuLayout::new((0..l.nr_cpus()).map(|c| l.llc_of(c)).collect())
        .map_err(|e| e.to_string())?;
    for c in 0..l.nr_cpus() {
        copy.set_online(c, l.is_online(c));
    }
    Ok(Arc::new(copy))
}

/// A layout from `llcs` lines: CPU `c` is behind the LLC whose list has it.
fn llcs_layout(llcs: &[CpuSet]) -> Result<Arc<CpuLayout>, String> {
    let nr = llcs
        .iter()
        .filter_map(|s| s.iter().last())
        .max()
        .map_or(0, |m| m + 1);
    let mut llc_of: Vec<Option<LlcId>> = vec![None; nr];
    for (i, set) in llcs.iter().enumerate() {
        let id = LlcId::try_from(i).map_err(|_| "too many LLCs".to_string())?;
        for cpu in set.iter() {
            if llc_of[cpu].replace(id).is_some() {
                return Err(format!("CPU {cpu} is in two LLCs"));
            }
        }
    }
    CpuLayout::new(llc_of)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// The replay in progress: the machine and settings, then the simulations
/// (one per policy, started at the first packet or consumption).
struct Replay {
    opts: Options,
    layout: Option<Arc<CpuLayout>>,
    topology: String,
    entries: Option<usize>,
    engine: EngineLine,
    sims: Vec<Sim>,
    started: bool,
    now: u64,
    hasher: ToeplitzHasher,
    packets: bool,
}

impl Replay {
    fn new(opts: Options) -> Self {
        let (layout, topology) = match &opts.topology {
            Some((l, name)) => (Some(Arc::clone(l)), name.clone()),
            None => (None, String::new()),
        };
        Self {
            opts,
            layout,
            topology,
            entries: None,
            engine: EngineLine::default(),
            sims: Vec::new(),
            started: false,
            now: 0,
            hasher: ToeplitzHasher::default(),
            packets: false,
        }
    }

    fn layout(&self) -> Result<&Arc<CpuLayout>, String> {
        self.layout
            .as_ref()
            .ok_or_else(|| "the first event must be `topology <hwloc synthetic spec>`".into())
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<CpuId, String> {
        let n = self.layout()?.nr_cpus();
        if cpu < n {
            Ok(cpu)
        } else {
            Err(format!(
                "CPU {cpu} is not in the topology (CPUs 0-{})",
                n - 1
            ))
        }
    }

    fn hash(&self, flow: Flow) -> u32 {
        match flow {
            Flow::Hash(h) => h,
            Flow::Tuple(k) => self.hasher.hash(&k),
        }
    }

    /// The machine and settings lines.
    fn header(
        &mut self,
        event: Event,
        seen_machine: &mut bool,
        make_layout: &dyn Fn(&str) -> Result<Arc<CpuLayout>, String>,
    ) -> Result<(), String> {
        match event {
            Event::Topology(_) | Event::Llcs(_) if *seen_machine => {
                return Err("only one `topology` line is allowed".into())
            }
            Event::Topology(spec) => {
                *seen_machine = true;
                // `--topology` wins over the trace's machine.
                if self.opts.topology.is_none() {
                    self.layout = Some(make_layout(&spec)?);
                    self.topology = spec;
                }
            }
            Event::Llcs(llcs) => {
                *seen_machine = true;
                if self.opts.topology.is_none() {
                    self.layout = Some(llcs_layout(&llcs)?);
                    self.topology = "llcs".into();
                }
            }
            Event::Table(n) => {
                if self.started {
                    return Err("`table` must come before the first `c` or `p` event".into());
                }
                // Validate now so the error names this line.
                DesiredCpuTable::new(n, self.layout()?.nr_cpus()).map_err(|e| e.to_string())?;
                self.entries = Some(n);
            }
            Event::Engine(e) => {
                if self.started {
                    return Err("`engine` must come before the first `c` or `p` event".into());
                }
                self.layout()?;
                self.engine = e;
            }
            _ => return Err("not a header line".into()),
        }
        Ok(())
    }

    fn desired_entries(&self) -> usize {
        self.opts
            .flow_table
            .or(self.entries)
            .unwrap_or(if self.opts.capture {
                DEFAULT_TABLE_PCAP
            } else {
                DEFAULT_TABLE
            })
    }

    fn config(&self, layout: &CpuLayout, policy: Policy) -> SimConfig {
        let workers = self
            .opts
            .cpus
            .or(self.engine.workers)
            .unwrap_or_else(|| layout.online_cpus());
        let queues = self
            .opts
            .queues
            .or(self.engine.queues)
            .unwrap_or(workers.len().max(1));
        let rps = match self.opts.rps {
            Rps::Local => RpsMode::Local,
            Rps::Spread => RpsMode::Spread,
            Rps::Auto => self.engine.rps.unwrap_or(if queues >= workers.len() {
                RpsMode::Local
            } else {
                RpsMode::Spread
            }),
        };
        SimConfig {
            workers,
            queues,
            policy,
            fast_path: self
                .opts
                .fast_path
                .or(self.engine.fast_path)
                .unwrap_or(true),
            rps,
            desired_entries: self.desired_entries(),
            rx_table_entries: self
                .opts
                .rx_table
                .or(self.engine.rx_table)
                .unwrap_or(DEFAULT_RX_TABLE),
            ring_capacity: self.opts.ring.or(self.engine.ring).unwrap_or(1024),
            service_ns: self.opts.service_ns,
            flow_idle_ms: self
                .opts
                .flow_idle_ms
                .or(self.engine.idle_ms)
                .unwrap_or(10_000),
            consumer: self.opts.consumer.unwrap_or(ConsumerModel::Trace),
            seed: self.opts.seed,
        }
    }

    /// Starts the simulations (once).
    fn start(&mut self) -> Result<(), String> {
        if self.started {
            return Ok(());
        }
        let base = Arc::clone(self.layout()?);
        let mut sims = Vec::new();
        for &policy in &self.opts.policies {
            let cfg = self.config(&base, policy);
            sims.push(Sim::new(cfg, copy_layout(&base)?).map_err(|e| e.to_string())?);
        }
        self.sims = sims;
        self.started = true;
        Ok(())
    }

    /// A timed event; `t` absent: at the previous event's time.
    fn timed(&mut self, t: Option<u64>, event: Event) -> Result<(), String> {
        let t = match t {
            Some(t) if t < self.now => {
                return Err(format!(
                    "t={t} is earlier than the event before it (t={})",
                    self.now
                ))
            }
            Some(t) => t,
            None => self.now,
        };
        let sim_event = match event {
            Event::Off(cpu, _) | Event::On(cpu, _) => {
                let online = matches!(event, Event::On(..));
                let cpu = self.check_cpu(cpu)?;
                if !self.started {
                    // Before the simulations exist the machine itself changes.
                    self.layout()?.set_online(cpu, online);
                    self.now = t;
                    return Ok(());
                }
                SimEvent::Online { cpu, online }
            }
            Event::Consume {
                flow, cpu, allowed, ..
            } => {
                let cpu = self.check_cpu(cpu)?;
                if let Some(max) = allowed.as_ref().and_then(|a| a.iter().last()) {
                    self.check_cpu(max)
                        .map_err(|e| format!("allowed list: {e}"))?;
                }
                SimEvent::Consume {
                    hash: self.hash(flow),
                    cpu,
                    allowed,
                }
            }
            Event::Packet { flow, rxq, .. } => {
                self.packets = true;
                SimEvent::Packet {
                    hash: self.hash(flow),
                    rxq,
                }
            }
            _ => return Err("not a timed event".into()),
        };
        self.start()?;
        self.now = t;
        for sim in &mut self.sims {
            sim.apply(t, sim_event).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A packet of a capture: rx queue by RSS.
    fn captured(&mut self, t: u64, key: &steer_core::flow::FlowKey) -> Result<(), String> {
        self.start()?;
        let hash = self.hasher.hash(key);
        let queues = self.sims.first().map_or(1, |s| s.config().queues) as u32;
        let rxq = (hash % RETA) % queues.max(1);
        self.packets = true;
        self.now = self.now.max(t);
        for sim in &mut self.sims {
            sim.apply(self.now, SimEvent::Packet { hash, rxq })
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Outcome, String> {
        self.start()?;
        let layout = Arc::clone(self.layout()?);
        let config = self
            .sims
            .first()
            .map(|s| s.config().clone())
            .ok_or("no simulation")?;
        let reports = self
            .sims
            .into_iter()
            .map(|s| (s.config().policy, s.finish()))
            .collect();
        Ok(Outcome {
            reports,
            config: config.clone(),
            topology: self.topology,
            nr_cpus: layout.nr_cpus(),
            nr_llcs: layout.nr_llcs(),
            table: config.desired_entries,
            extended: self.packets || self.opts.capture,
            pcap: None,
        })
    }
}

/// What a replay found.
#[derive(Debug, Clone)]
struct Outcome {
    reports: Vec<(Policy, SimReport)>,
    config: SimConfig,
    topology: String,
    nr_cpus: usize,
    nr_llcs: usize,
    table: usize,
    /// Packets were replayed: report the dispatch side too.
    extended: bool,
    pcap: Option<PcapStats>,
}

/// Reads a text trace: header lines set the machine and settings, timed
/// lines go to the simulations (or, with a capture, are returned to be
/// merged into it by time).
fn read_trace<R: BufRead>(
    replay: &mut Replay,
    input: R,
    make_layout: &dyn Fn(&str) -> Result<Arc<CpuLayout>, String>,
    mut defer: Option<&mut Vec<(u64, usize, Event)>>,
) -> anyhow::Result<()> {
    let mut seen_machine = false;
    let mut last_t = 0u64;
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let err = |reason: String| LineError { line: n, reason };
        let line = line.map_err(|e| err(format!("cannot read: {e}")))?;
        let Some(event) = trace::parse_line(&line).map_err(err)? else {
            continue;
        };
        match event {
            Event::Topology(_) | Event::Llcs(_) | Event::Table(_) | Event::Engine(_) => {
                replay
                    .header(event, &mut seen_machine, make_layout)
                    .map_err(err)?;
            }
            Event::Consume { t, .. }
            | Event::Packet { t, .. }
            | Event::Off(_, t)
            | Event::On(_, t) => {
                replay.layout().map_err(err)?;
                match defer.as_deref_mut() {
                    Some(list) => {
                        let t = match t {
                            Some(t) if t < last_t => {
                                return Err(err(format!(
                                    "t={t} is earlier than the event before it (t={last_t})"
                                ))
                                .into())
                            }
                            Some(t) => t,
                            None => last_t,
                        };
                        last_t = t;
                        list.push((t, n, event));
                    }
                    None => replay.timed(t, event).map_err(err)?,
                }
            }
        }
    }
    if replay.layout.is_none() {
        anyhow::bail!(
            "the trace has no `topology <hwloc synthetic spec>` line (or give --topology)"
        );
    }
    Ok(())
}

/// Replays `trace` (and the capture at `capture`, if any).
fn replay(
    opts: Options,
    trace: Option<Box<dyn BufRead>>,
    capture: Option<(&Path, &[u16])>,
    make_layout: &dyn Fn(&str) -> Result<Arc<CpuLayout>, String>,
) -> anyhow::Result<Outcome> {
    let mut replay = Replay::new(opts);
    let Some((path, ports)) = capture else {
        let input = trace.context("no trace")?;
        read_trace(&mut replay, input, make_layout, None)?;
        return replay.finish().map_err(anyhow::Error::msg);
    };
    let mut deferred = Vec::new();
    if let Some(input) = trace {
        read_trace(&mut replay, input, make_layout, Some(&mut deferred))?;
    }
    if replay.layout.is_none() {
        anyhow::bail!("--pcap needs a machine: --topology live|<spec>|<file.xml>");
    }
    let mut pending = deferred.into_iter().peekable();
    let stats = packets::read_path(path, ports, |t, key| -> anyhow::Result<()> {
        while let Some((tt, n, event)) = pending.next_if(|(tt, _, _)| *tt <= t) {
            replay
                .timed(Some(tt), event)
                .map_err(|reason| LineError { line: n, reason })?;
        }
        replay.captured(t, &key).map_err(anyhow::Error::msg)
    })
    .map_err(|e| match e {
        PathError::Capture(text) => anyhow::Error::msg(text),
        PathError::Stopped(e) => e,
    })?;
    for (tt, n, event) in pending {
        replay
            .timed(Some(tt.max(replay.now)), event)
            .map_err(|reason| LineError { line: n, reason })?;
    }
    let mut outcome = replay.finish().map_err(anyhow::Error::msg)?;
    outcome.pcap = Some(stats);
    Ok(outcome)
}

/// The desired-table counts, as today's output has them.
fn table_counts(m: &mut Map<String, Value>, policy: Policy, r: &SimReport) {
    m.insert("records".into(), json!(r.records));
    m.insert("updates".into(), json!(r.updates()));
    m.insert("suppressed".into(), json!(r.suppressed));
    m.insert("unchanged".into(), json!(r.unchanged));
    let reasons: &[WriteReason] = match policy {
        Policy::Always => &[WriteReason::NewOrOtherFlow, WriteReason::Changed],
        Policy::LlcAffinity => &[
            WriteReason::NewOrOtherFlow,
            WriteReason::ForcedOffline,
            WriteReason::ForcedAffinity,
            WriteReason::CrossLlc,
        ],
    };
    for &reason in reasons {
        m.insert(reason.name().into(), json!(r.written(reason)));
    }
}

/// The dispatch side: steering updates (hook calls) and where packets went.
fn dispatch_counts(m: &mut Map<String, Value>, r: &SimReport) {
    m.insert("steering_updates".into(), json!(r.rx.hook_calls));
    m.insert("first_placements".into(), json!(r.first_placements));
    m.insert("moves".into(), json!(r.moves));
    m.insert("held_back".into(), json!(r.rx.held_back));
    m.insert("expired".into(), json!(r.rx.expired));
    m.insert("packets".into(), json!(r.packets));
    m.insert("flows".into(), json!(r.flows));
    m.insert("fast_path".into(), json!(r.fast_path));
    m.insert("queued_local".into(), json!(r.queued_local));
    m.insert("steered_out".into(), json!(r.steered_out));
    m.insert("ring_drops".into(), json!(r.ring_drops));
    m.insert("no_target".into(), json!(r.no_target));
    m.insert("no_flow".into(), json!(r.no_flow));
    m.insert("deepest_ring".into(), json!(r.deepest_ring));
    m.insert("migrations".into(), json!(r.migrations));
    m.insert("duration_ns".into(), json!(r.duration_ns));
}

fn saved(before: u64, after: u64) -> Value {
    let pct = if before == 0 {
        0.0
    } else {
        (before as f64 - after as f64) * 100.0 / before as f64
    };
    json!({"count": before as i64 - after as i64, "percent": (pct * 10.0).round() / 10.0})
}

impl Outcome {
    fn report(&self, policy: Policy) -> Option<&SimReport> {
        self.reports
            .iter()
            .find(|(p, _)| *p == policy)
            .map(|(_, r)| r)
    }

    fn setup(&self) -> Value {
        let c = &self.config;
        json!({
            "topology": self.topology,
            "workers": c.workers.to_string(),
            "queues": c.queues,
            "rps": match c.rps { RpsMode::Local => "local", RpsMode::Spread => "spread" },
            "fast_path": c.fast_path,
            "rx_table": c.rx_table_entries,
            "ring": c.ring_capacity,
            "service_ns": c.service_ns,
            "flow_idle_ms": c.flow_idle_ms,
            "consumer": c.consumer.to_string(),
        })
    }

    fn json(&self) -> Value {
        let mut m = Map::new();
        let single = self.reports.len() == 1;
        let policy = match self.reports.as_slice() {
            [(p, _)] => p.name(),
            _ => "both",
        };
        m.insert("policy".into(), json!(policy));
        m.insert("cpus".into(), json!(self.nr_cpus));
        m.insert("llcs".into(), json!(self.nr_llcs));
        m.insert("table".into(), json!(self.table));
        if single {
            let (p, r) = &self.reports[0];
            table_counts(&mut m, *p, r);
            if self.extended {
                dispatch_counts(&mut m, r);
            }
        } else {
            for (p, r) in &self.reports {
                let mut sub = Map::new();
                table_counts(&mut sub, *p, r);
                if self.extended {
                    dispatch_counts(&mut sub, r);
                }
                m.insert(p.name().into(), Value::Object(sub));
            }
            if let (Some(a), Some(l)) = (
                self.report(Policy::Always),
                self.report(Policy::LlcAffinity),
            ) {
                let mut s = Map::new();
                s.insert("updates".into(), saved(a.updates(), l.updates()));
                if self.extended {
                    s.insert(
                        "steering_updates".into(),
                        saved(a.rx.hook_calls, l.rx.hook_calls),
                    );
                }
                m.insert("saved_by_llc".into(), Value::Object(s));
            }
        }
        if self.extended {
            m.insert("setup".into(), self.setup());
        }
        if let Some(p) = &self.pcap {
            m.insert(
                "pcap".into(),
                json!({
                    "frames": p.frames,
                    "packets": p.packets,
                    "not_ip": p.not_ip,
                    "other_port": p.other_port,
                    "malformed": p.malformed,
                    "out_of_order": p.out_of_order,
                }),
            );
        }
        Value::Object(m)
    }

    /// The short human table.
    fn table(&self) -> String {
        type Row = (&'static str, fn(&SimReport) -> u64);
        let mut rows: Vec<Row> = Vec::new();
        if self.extended {
            rows.extend([
                (
                    "steering updates",
                    (|r| r.rx.hook_calls) as fn(&SimReport) -> u64,
                ),
                ("  first placements", |r| r.first_placements),
                ("  moves", |r| r.moves),
                ("moves held back", |r| r.rx.held_back),
            ]);
        }
        rows.extend([
            (
                "desired-table writes",
                (|r| r.updates()) as fn(&SimReport) -> u64,
            ),
            ("  suppressed", |r| r.suppressed),
            ("consumption records", |r| r.records),
        ]);
        if self.extended {
            rows.extend([
                ("fast path", (|r| r.fast_path) as fn(&SimReport) -> u64),
                ("steered out", |r| r.steered_out),
                ("queued local", |r| r.queued_local),
                ("ring drops", |r| r.ring_drops),
            ]);
        }
        let mut out = String::new();
        let c = &self.config;
        if let Some((_, r)) = self.reports.first() {
            if self.extended {
                out.push_str(&format!(
                    "{} packets, {} flows over {:.3} ms; {} rx queues, workers {}, consumer {}\n",
                    r.packets,
                    r.flows,
                    r.duration_ns as f64 / 1e6,
                    c.queues,
                    c.workers,
                    c.consumer
                ));
            }
        }
        out.push_str(&format!(
            "machine {} ({} CPUs, {} LLCs), desired table {}\n\n",
            self.topology, self.nr_cpus, self.nr_llcs, self.table
        ));
        out.push_str(&format!("{:<22}", ""));
        for (p, _) in &self.reports {
            out.push_str(&format!("{:>12}", p.name()));
        }
        if self.reports.len() == 2 {
            out.push_str(&format!("{:>12}", "llc saves"));
        }
        out.push('\n');
        for (label, get) in rows {
            out.push_str(&format!("{label:<22}"));
            for (_, r) in &self.reports {
                out.push_str(&format!("{:>12}", get(r)));
            }
            if let (Some(a), Some(l), true) = (
                self.report(Policy::Always),
                self.report(Policy::LlcAffinity),
                self.reports.len() == 2 && (label.contains("updates") || label.contains("writes")),
            ) {
                let pct = saved(get(a), get(l))["percent"].as_f64().unwrap_or(0.0);
                out.push_str(&format!("{pct:>11.1}%"));
            }
            out.push('\n');
        }
        out
    }
}

fn synthetic_layout(spec: &str) -> Result<Arc<CpuLayout>, String> {
    Topology::synthetic(spec)
        .map(|t| t.layout())
        .map_err(|e| e.to_string())
}

/// `--topology`: `live`, an XML file, or an hwloc synthetic spec.
fn load_topology(arg: &str) -> anyhow::Result<(Arc<CpuLayout>, String)> {
    let path = Path::new(arg);
    let topo = if arg == "live" {
        Topology::live()?
    } else if arg.ends_with(".xml") || path.is_file() {
        Topology::from_xml_file(path)?
    } else {
        Topology::synthetic(arg)?
    };
    let name = match topo.source().name() {
        "hwloc" | "sysfs" => "live".to_string(),
        "xml" => arg.to_string(),
        _ => arg.to_string(),
    };
    Ok((topo.layout(), name))
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let mut opts = Options::new(args.policy.policies());
    opts.topology = match (&args.topology, &args.pcap) {
        (Some(t), _) => Some(load_topology(t)?),
        // A capture has no machine line: the live one unless a trace names one.
        (None, Some(_)) if args.trace.is_none() => Some(load_topology("live")?),
        _ => None,
    };
    opts.cpus = args.cpus;
    opts.queues = args.queues;
    opts.rps = args.rps;
    opts.fast_path = args.fast_path.map(OnOff::is_on);
    opts.flow_table = args.flow_table;
    opts.rx_table = args.rx_table;
    opts.ring = args.ring_size;
    opts.service_ns = args.service_ns;
    opts.flow_idle_ms = args.flow_idle_ms;
    opts.consumer = args.consumer;
    opts.seed = args.seed;
    opts.capture = args.pcap.is_some();
    if args.pcap.is_some() && args.trace.is_none() && args.consumer.is_none() {
        anyhow::bail!(
            "--pcap needs to know who consumes the flows: --consumer hash|first|migrate:<ms>[:<p>], \
             or a trace with `c` events"
        );
    }
    let trace: Option<Box<dyn BufRead>> = match (&args.trace, &args.pcap) {
        (Some(p), _) if p.as_os_str() != "-" => Some(Box::new(BufReader::new(
            std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?,
        ))),
        (None, Some(_)) => None,
        _ => Some(Box::new(BufReader::new(
            Box::new(std::io::stdin().lock()) as Box<dyn Read>
        ))),
    };
    let capture = args.pcap.as_deref().map(|p| (p, args.port.as_slice()));
    let outcome = replay(opts, trace, capture, &synthetic_layout)?;
    let out = if args.table {
        outcome.table()
    } else if args.pretty {
        serde_json::to_string_pretty(&outcome.json())? + "\n"
    } else {
        serde_json::to_string(&outcome.json())? + "\n"
    };
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
