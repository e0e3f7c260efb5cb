//! From raw phase results to the report: medians over the interleaved runs,
//! each server's own cost (its whole-machine CPU per reply minus the
//! reflector's at the same rate), the kernel's figure (the better of the
//! kernel echo and sockperf, per number), the ratios, the flags, the table
//! and the JSON.
//!
//! Invariant: a number that could not be measured is `None` and printed as
//! `-` with a flag saying why; it is never replaced by a default.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    flows::FlowCounts,
    gen::PhaseResult,
    num::{f0, f1, f2, median, median_of, ratio_pos},
    servers::Kind,
    table::{Col, Layout},
};

/// The phase names: `max` and the fixed rates.
pub fn phase_name(rate: Option<u64>) -> String {
    rate.map_or("max".into(), |r| r.to_string())
}

/// One server in one run.
#[derive(Debug, Clone, Serialize)]
pub struct ServerRun {
    /// Run number (from 1).
    pub run: usize,
    /// Server.
    pub server: Kind,
    /// Why it has no numbers (did not start, did not answer).
    pub error: Option<String>,
    /// (phase name, result).
    pub phases: Vec<(String, PhaseResult)>,
    /// Where the server's threads ran.
    pub ran_on: String,
    /// Its last output line when it stopped.
    pub last_words: String,
    /// steer's --stats-json, when it is steer.
    pub stats: Option<serde_json::Value>,
}

/// Share of the asked rate below which a phase "did not hold the rate".
pub const HOLD: f64 = 0.95;

/// One line per phase as it finishes.
pub fn phase_line(run: usize, kind: Kind, phase: &str, p: &PhaseResult) -> String {
    let cpus: Vec<String> = p
        .cpu
        .per_cpu_busy
        .iter()
        .enumerate()
        .map(|(i, b)| format!("cpu{i} {:.0}%", b * 100.0))
        .collect();
    let answered = p.per_flow.iter().map(|f| f.answered);
    let flows = match (answered.clone().min(), answered.max()) {
        (Some(lo), Some(hi)) => format!(" | {} flows answered {lo}..{hi} each", p.per_flow.len()),
        _ => String::new(),
    };
    let mut s = format!(
        "run {run} {:<11} {:>7}: offered {:>9.0}/s answered {:>9.0}/s sent {} lost {} dup {} reord {}{flows} | {} | {} us/reply | switches/reply {} | server per reply: {} us CPU, {} switches ({} voluntary){} | p50/p99/p99.9 {} us | generator on cpu{}",
        kind.name(),
        phase,
        p.offered_pps,
        p.answered_pps,
        p.total.sent,
        p.total.lost,
        p.total.duplicated,
        p.total.reordered,
        cpus.join(" "),
        p.cpu_us_per_reply.map_or("-".into(), |c| format!("{c:.2}")),
        p.switches_per_reply.map_or("-".into(), |c| format!("{c:.2}")),
        p.server_cpu_us_per_reply.map_or("-".into(), |c| format!("{c:.2}")),
        p.server_switches_per_reply.map_or("-".into(), |c| format!("{c:.2}")),
        p.server_voluntary_per_reply.map_or("-".into(), |c| format!("{c:.2}")),
        p.backend_cpu_us_per_reply.map_or(String::new(), |c| format!(", backend {c:.2} us CPU")),
        p.latency.map_or("-".into(), |l| format!("{:.1}/{:.1}/{:.1}", l.p50_us, l.p99_us, l.p999_us)),
        p.generator_cpu,
    );
    for f in phase_flags(p) {
        s.push_str("  [");
        s.push_str(&f);
        s.push(']');
    }
    s
}

/// What is wrong with one phase, if anything.
pub fn phase_flags(p: &PhaseResult) -> Vec<String> {
    let mut f = Vec::new();
    if p.answered_pps == 0.0 {
        f.push("NO REPLIES".into());
    }
    if let Some(asked) = p.asked_pps {
        if let Some(why) = &p.not_held {
            f.push(format!("RATE NOT HELD: {why}"));
        } else if p.offered_pps < HOLD * asked {
            f.push(format!(
                "RATE NOT HELD: offered {:.0} of {:.0}/s",
                p.offered_pps, asked
            ));
        } else if p.total.sent > 0 && p.total.lost as f64 > 0.01 * p.total.sent as f64 {
            f.push(format!(
                "lost {:.1}% below capacity",
                100.0 * p.total.lost as f64 / p.total.sent as f64
            ));
        }
    }
    if p.foreign_cpu_secs > 0.02 * p.window_secs * p.cpu.per_cpu_busy.len().max(1) as f64 {
        f.push(format!(
            "BUSY MACHINE: other processes used {:.0}% of the CPUs",
            100.0 * p.foreign_cpu_secs / (p.window_secs * p.cpu.per_cpu_busy.len().max(1) as f64)
        ));
    }
    if p.total.reordered > 0 {
        f.push(format!("{} reordered", p.total.reordered));
    }
    if p.total.duplicated > 0 {
        f.push(format!("{} duplicated", p.total.duplicated));
    }
    if p.total.bogus > 0 {
        f.push(format!("{} bogus replies", p.total.bogus));
    }
    f
}

/// One server's medians.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Server.
    pub server: String,
    /// Runs with numbers / runs.
    pub runs_ok: usize,
    /// Runs.
    pub runs: usize,
    /// Replies/s at --rate max.
    pub capacity: Option<f64>,
    /// Offered/s at --rate max.
    pub offered_at_max: Option<f64>,
    /// The most replies/s of any phase (0 reordered): under overload a
    /// kernel server answers less than at a lower offered rate.
    pub peak: Option<f64>,
    /// Whole-machine CPU us per reply at --rate max.
    pub cpu_us_at_max: Option<f64>,
    /// Per fixed rate: (rate, whole-machine us/reply, own us/reply).
    pub cost: Vec<(u64, Option<f64>, Option<f64>)>,
    /// Per fixed rate: what the server process did per reply.
    pub process: Vec<ProcessCost>,
    /// p50/p99/p99.9 us at the latency rate.
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// 99.9th percentile.
    pub p999_us: Option<f64>,
    /// What is wrong or worth knowing.
    pub flags: Vec<String>,
    /// Where its threads ran (last run).
    pub ran_on: String,
}

/// Per reply at one fixed rate, medians over the runs: the server
/// process's own CPU time and context switches (counted per process, so
/// other load on the machine barely moves them), next to the whole
/// machine's context switches.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProcessCost {
    /// The rate.
    pub rate: u64,
    /// CPU time of the server's threads, us.
    pub cpu_us: Option<f64>,
    /// CPU time of a proxy's backend, us.
    pub backend_cpu_us: Option<f64>,
    /// Voluntary context switches of the server's threads.
    pub voluntary: Option<f64>,
    /// All context switches of the server's threads.
    pub switches: Option<f64>,
    /// Context switches of the whole machine.
    pub machine_switches: Option<f64>,
}

fn med(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    median(v)
}

fn phase<'a>(r: &'a ServerRun, name: &str) -> Option<&'a PhaseResult> {
    r.phases.iter().find(|(n, _)| n == name).map(|(_, p)| p)
}

/// The summaries of every server in `kinds` order, with own costs.
pub fn summarize(kinds: &[Kind], runs: &[ServerRun], rates: &[u64]) -> Vec<Summary> {
    let mut out: Vec<Summary> = kinds
        .iter()
        .map(|&k| summarize_one(k, runs, rates))
        .collect();
    let reflector: Option<Summary> = out.iter().find(|s| s.server == "reflector").cloned();
    for s in out.iter_mut() {
        for (i, c) in s.cost.iter_mut().enumerate() {
            let base = reflector
                .as_ref()
                .and_then(|r| r.cost.get(i))
                .and_then(|x| x.1);
            c.2 = match (c.1, base) {
                (Some(a), Some(b)) => Some(a - b),
                _ => None,
            };
        }
    }
    out
}

fn summarize_one(kind: Kind, runs: &[ServerRun], rates: &[u64]) -> Summary {
    let mine: Vec<&ServerRun> = runs.iter().filter(|r| r.server == kind).collect();
    let mut s = Summary {
        server: kind.name().into(),
        runs: mine.len(),
        runs_ok: mine
            .iter()
            .filter(|r| r.error.is_none() && !r.phases.is_empty())
            .count(),
        ran_on: mine.last().map(|r| r.ran_on.clone()).unwrap_or_default(),
        ..Summary::default()
    };
    for r in &mine {
        if let Some(e) = &r.error {
            s.flags.push(format!("run {}: {e}", r.run));
        }
    }
    let max: Vec<&PhaseResult> = mine.iter().filter_map(|r| phase(r, "max")).collect();
    // Zero is a measurement too (a kernel server can livelock at max): it
    // stays, flagged by the phase; only a server without phases has none.
    s.capacity = med(max.iter().map(|p| Some(p.answered_pps)));
    s.offered_at_max = med(max.iter().map(|p| Some(p.offered_pps)));
    s.cpu_us_at_max = med(max.iter().map(|p| p.cpu_us_per_reply));
    let reordered: u64 = max.iter().map(|p| p.total.reordered).sum();
    if reordered > 0 && kind == Kind::Reflector {
        // veth sends XDP_TX frames to the peer queue of the CPU that ran
        // the program, so a flow can straddle two queues: the floor's rate
        // still stands, flagged.
        s.flags.push(format!(
            "{reordered} reordered at max (veth's XDP_TX queue follows the CPU)"
        ));
    } else if reordered > 0 {
        s.flags
            .push(format!("{reordered} reordered at max: no clean capacity"));
        s.capacity = None;
    }
    if let (Some(c), Some(o)) = (s.capacity, s.offered_at_max) {
        if c >= HOLD * o {
            s.flags.push(format!(
                "generator-bound: answered all it was offered ({o:.0}/s); capacity is a lower bound"
            ));
        }
    }
    s.peak = med(mine.iter().map(|r| {
        r.phases
            .iter()
            .filter(|(_, p)| p.total.reordered == 0 && p.answered_pps > 0.0)
            .map(|(_, p)| p.answered_pps)
            .reduce(f64::max)
    }));
    if let (Some(c), Some(p)) = (s.capacity, s.peak) {
        if p > 1.05 * c {
            s.flags.push(format!(
                "overload collapse: {c:.0}/s at max, but {p:.0}/s at a lower offered rate"
            ));
        }
    }
    if kind == Kind::Afxdp {
        return s;
    }
    for (i, &rate) in rates.iter().enumerate() {
        let name = phase_name(Some(rate));
        let ps: Vec<&PhaseResult> = mine.iter().filter_map(|r| phase(r, &name)).collect();
        // A phase that missed its rate still counts, flagged (below).
        let held = |p: &PhaseResult| p.answered_pps > 0.0;
        let bad: Vec<String> = ps.iter().flat_map(|p| phase_flags(p)).collect();
        for b in bad.iter().take(2) {
            s.flags.push(format!("@{rate}: {b}"));
        }
        s.cost.push((
            rate,
            med(ps.iter().filter(|p| held(p)).map(|p| p.cpu_us_per_reply)),
            None,
        ));
        let held_med =
            |f: fn(&PhaseResult) -> Option<f64>| med(ps.iter().filter(|p| held(p)).map(|p| f(p)));
        s.process.push(ProcessCost {
            rate,
            cpu_us: held_med(|p| p.server_cpu_us_per_reply),
            backend_cpu_us: held_med(|p| p.backend_cpu_us_per_reply),
            voluntary: held_med(|p| p.server_voluntary_per_reply),
            switches: held_med(|p| p.server_switches_per_reply),
            machine_switches: held_med(|p| p.switches_per_reply),
        });
        if i == 0 {
            let l: Vec<_> = ps
                .iter()
                .filter(|p| held(p))
                .filter_map(|p| p.latency)
                .collect();
            s.p50_us = median_of(&l.iter().map(|l| l.p50_us).collect::<Vec<_>>());
            s.p99_us = median_of(&l.iter().map(|l| l.p99_us).collect::<Vec<_>>());
            s.p999_us = median_of(&l.iter().map(|l| l.p999_us).collect::<Vec<_>>());
        }
    }
    s
}

/// The kernel's figure: per number, the better of the kernel servers
/// (higher capacity, lower cost and latency), with the server that gave it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelBest {
    /// (value, server) of capacity.
    pub capacity: Option<(f64, String)>,
    /// (value, server) of the peak reply rate.
    pub peak: Option<(f64, String)>,
    /// Per rate: (own us/reply, server).
    pub own_cost: Vec<Option<(f64, String)>>,
    /// Per rate: (whole-machine us/reply, server).
    pub cost: Vec<Option<(f64, String)>>,
    /// p99 at the latency rate.
    pub p99_us: Option<(f64, String)>,
}

fn best(it: impl Iterator<Item = (Option<f64>, String)>, higher: bool) -> Option<(f64, String)> {
    it.filter_map(|(v, n)| v.map(|v| (v, n))).reduce(|a, b| {
        if (b.0 > a.0) == higher && b.0 != a.0 {
            b
        } else {
            a
        }
    })
}

/// The kernel's figure from the summaries.
pub fn kernel_best(sums: &[Summary], rates: &[u64]) -> KernelBest {
    let k: Vec<&Summary> = sums
        .iter()
        .filter(|s| s.server == "kernel-echo" || s.server == "sockperf")
        .collect();
    KernelBest {
        capacity: best(k.iter().map(|s| (s.capacity, s.server.clone())), true),
        peak: best(k.iter().map(|s| (s.peak, s.server.clone())), true),
        own_cost: (0..rates.len())
            .map(|i| {
                best(
                    k.iter()
                        .map(|s| (s.cost.get(i).and_then(|c| c.2), s.server.clone())),
                    false,
                )
            })
            .collect(),
        cost: (0..rates.len())
            .map(|i| {
                best(
                    k.iter()
                        .map(|s| (s.cost.get(i).and_then(|c| c.1), s.server.clone())),
                    false,
                )
            })
            .collect(),
        p99_us: best(k.iter().map(|s| (s.p99_us, s.server.clone())), false),
    }
}

/// The ratios the report gives (steer over the kernel's figure, steer's
/// capacity over the raw AF_XDP turnaround's).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ratios {
    /// steer capacity / kernel capacity.
    pub capacity: Option<f64>,
    /// steer peak / kernel peak.
    pub peak: Option<f64>,
    /// Per rate: steer own cost / kernel own cost.
    pub own_cost: Vec<(u64, Option<f64>)>,
    /// Per rate: steer whole-machine cost / kernel whole-machine cost.
    pub cost: Vec<(u64, Option<f64>)>,
    /// steer p99 / kernel p99 at the latency rate.
    pub p99: Option<f64>,
    /// steer capacity / raw AF_XDP turnaround capacity.
    pub capacity_vs_afxdp: Option<f64>,
    /// steer's whole-machine cost at the latency rate / at capacity.
    pub wakeup_tax: Option<f64>,
    /// The same for steer's own cost (minus the reflector's at the same
    /// rate, and at capacity minus the reflector's at max): without the
    /// generator's own per-wake-up cost, which is not steer's.
    pub wakeup_tax_own: Option<f64>,
}

/// steer's proxy over the same forwarder on plain tokio (`steer-proxy`
/// over `kernel-proxy`), at the proxies' own rates.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProxyRatios {
    /// Capacity (datagrams forwarded and answered per second at max).
    pub capacity: Option<f64>,
    /// Per rate: whole-machine CPU per forwarded datagram.
    pub cost: Vec<(u64, Option<f64>)>,
    /// Per rate: own CPU per forwarded datagram (minus the reflector's).
    pub own_cost: Vec<(u64, Option<f64>)>,
    /// p99 at the first proxy rate.
    pub p99: Option<f64>,
}

/// The proxy ratios from the proxies' summaries.
pub fn proxy_ratios(sums: &[Summary], rates: &[u64]) -> ProxyRatios {
    let get = |n: &str| sums.iter().find(|s| s.server == n);
    let (s, k) = (get("steer-proxy"), get("kernel-proxy"));
    ProxyRatios {
        capacity: ratio_pos(s.and_then(|s| s.capacity), k.and_then(|k| k.capacity)),
        cost: (0..rates.len())
            .map(|i| {
                let cost = |x: Option<&Summary>| x.and_then(|x| x.cost.get(i)).and_then(|c| c.1);
                (rates[i], ratio_pos(cost(s), cost(k)))
            })
            .collect(),
        own_cost: (0..rates.len())
            .map(|i| {
                let own = |x: Option<&Summary>| x.and_then(|x| x.cost.get(i)).and_then(|c| c.2);
                (rates[i], ratio_pos(own(s), own(k)))
            })
            .collect(),
        p99: ratio_pos(s.and_then(|s| s.p99_us), k.and_then(|k| k.p99_us)),
    }
}

/// The columns of the echo and proxy tables: the name, `lead` numbers,
/// whole-machine and own cost per rate, latency.
fn cost_layout(lead: &[usize], rates: usize) -> Layout {
    let mut l = Layout::new(&[12], &[]);
    for &w in lead {
        l.push(Col::R(w));
    }
    for _ in 0..rates {
        l.extend(&[Col::R(10), Col::R(8)]);
    }
    l.extend(&[Col::R(8); 3]);
    l
}

/// The head of a cost table: `name`, the `lead` names, then per rate
/// `us@RATE` and `own`, then the latency percentiles.
fn cost_head(name: &str, lead: &[&str], rates: &[u64]) -> Vec<String> {
    let mut h: Vec<String> = std::iter::once(name)
        .chain(lead.iter().copied())
        .map(String::from)
        .collect();
    for rate in rates {
        h.push(format!("us@{}", short(*rate)));
        h.push("own".into());
    }
    h.extend(["p50 us", "p99 us", "p99.9 us"].map(String::from));
    h
}

/// One server's row of a cost table: its name, `lead`, its whole-machine
/// and own cost at each of `rates` rates, its latency.
fn cost_row(s: &Summary, lead: Vec<String>, rates: usize) -> Vec<String> {
    let mut row = vec![s.server.clone()];
    row.extend(lead);
    for i in 0..rates {
        let c = s.cost.get(i);
        row.push(f2(c.and_then(|c| c.1)));
        row.push(f2(c.and_then(|c| c.2)));
    }
    row.extend([f1(s.p50_us), f1(s.p99_us), f1(s.p999_us)]);
    row
}

/// A ratio row of a cost table: `name`, `lead`, the (whole-machine, own)
/// pair per rate, then an empty p50 cell and `p99`.
fn ratio_row(
    name: &str,
    lead: Vec<String>,
    per_rate: impl Iterator<Item = (Option<f64>, Option<f64>)>,
    p99: String,
) -> Vec<String> {
    let mut row = vec![name.to_owned()];
    row.extend(lead);
    for (c, o) in per_rate {
        row.push(f2(c));
        row.push(f2(o));
    }
    row.extend([String::new(), p99]);
    row
}

/// The flag lines (`! server: flag`) of `sums`.
fn flag_lines(t: &mut String, sums: &[Summary]) {
    for s in sums {
        for f in &s.flags {
            let _ = writeln!(t, "! {}: {f}", s.server);
        }
    }
}

/// The proxies' table: capacity, whole-machine CPU per forwarded datagram
/// at each proxy rate, latency at the first, and steer over plain tokio.
pub fn proxy_table(sums: &[Summary], r: &ProxyRatios, rates: &[u64]) -> String {
    let mut t = String::new();
    let lat = rates.first().copied().unwrap_or(0);
    let _ = writeln!(
        t,
        "\nproxies (a reply = a datagram forwarded to a kernel echo on loopback and back; the echo on the server CPUs too); cost = whole-machine busy CPU per reply, own = minus the reflector's; latency at {lat}/s"
    );
    let n = rates.len();
    let l = cost_layout(&[11, 11], n);
    t += &l.line(&cost_head("proxy", &["capacity/s", "offered/s"], rates));
    for s in sums {
        t += &l.line(&cost_row(s, vec![f0(s.capacity), f0(s.offered_at_max)], n));
    }
    let per_rate = (0..n).map(|i| {
        (
            r.cost.get(i).and_then(|x| x.1),
            r.own_cost.get(i).and_then(|x| x.1),
        )
    });
    t += &l.line(&ratio_row(
        "steer/tokio",
        vec![f2(r.capacity), String::new()],
        per_rate,
        f2(r.p99),
    ));
    // The proxy's process alone: its CPU time and context switches are
    // counted per process, so other load on the machine barely moves them
    // (each switch costs several microseconds of CPU here).
    let _ = writeln!(
        t,
        "\nper reply, the proxy's own process (CPU time of its threads and of its backend; its threads' voluntary context switches, all of them, and the whole machine's)"
    );
    let mut l = Layout::new(&[12], &[]);
    let mut head = vec!["proxy".to_owned()];
    for rate in rates {
        l.extend(&[Col::R(9), Col::R(9), Col::R(7), Col::R(7), Col::R(8)]);
        head.push(format!("cpu@{}", short(*rate)));
        head.extend(["backend", "vol", "all", "machine"].map(String::from));
    }
    t += &l.line(&head);
    for s in sums.iter().filter(|s| s.server != "reflector") {
        let mut row = vec![s.server.clone()];
        for i in 0..n {
            let p = s.process.get(i).cloned().unwrap_or_default();
            row.extend([
                f2(p.cpu_us),
                f2(p.backend_cpu_us),
                f2(p.voluntary),
                f2(p.switches),
                f2(p.machine_switches),
            ]);
        }
        t += &l.line(&row);
    }
    flag_lines(&mut t, sums);
    t
}

/// Computes the ratios.
pub fn ratios(sums: &[Summary], k: &KernelBest, rates: &[u64]) -> Ratios {
    let get = |n: &str| sums.iter().find(|s| s.server == n);
    let steer = get("steer");
    let afxdp = get("afxdp");
    Ratios {
        capacity: ratio_pos(
            steer.and_then(|s| s.capacity),
            k.capacity.as_ref().map(|x| x.0),
        ),
        peak: ratio_pos(steer.and_then(|s| s.peak), k.peak.as_ref().map(|x| x.0)),
        own_cost: rates
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let s = steer.and_then(|s| s.cost.get(i)).and_then(|c| c.2);
                (
                    r,
                    ratio_pos(s, k.own_cost.get(i).cloned().flatten().map(|x| x.0)),
                )
            })
            .collect(),
        cost: rates
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let s = steer.and_then(|s| s.cost.get(i)).and_then(|c| c.1);
                (
                    r,
                    ratio_pos(s, k.cost.get(i).cloned().flatten().map(|x| x.0)),
                )
            })
            .collect(),
        p99: ratio_pos(steer.and_then(|s| s.p99_us), k.p99_us.as_ref().map(|x| x.0)),
        capacity_vs_afxdp: ratio_pos(
            steer.and_then(|s| s.capacity),
            afxdp.and_then(|s| s.capacity),
        ),
        wakeup_tax: ratio_pos(
            steer.and_then(|s| s.cost.first()).and_then(|c| c.1),
            steer.and_then(|s| s.cpu_us_at_max),
        ),
        wakeup_tax_own: ratio_pos(
            steer.and_then(|s| s.cost.first()).and_then(|c| c.2),
            match (
                steer.and_then(|s| s.cpu_us_at_max),
                get("reflector").and_then(|s| s.cpu_us_at_max),
            ) {
                (Some(a), Some(b)) => Some(a - b),
                _ => None,
            },
        ),
    }
}

/// The table.
pub fn table(sums: &[Summary], k: &KernelBest, r: &Ratios, rates: &[u64], runs: usize) -> String {
    let mut t = String::new();
    let lat = rates.first().copied().unwrap_or(0);
    let _ = writeln!(
        t,
        "\nmedians of {runs} interleaved run(s); cost = whole-machine busy CPU (all CPUs, all contexts, /proc/stat) per reply, own = minus the reflector's at the same rate; latency at {lat}/s, send to arrival in XDP"
    );
    let n = rates.len();
    let l = cost_layout(&[11, 11, 9], n);
    t += &l.line(&cost_head(
        "server",
        &["capacity/s", "offered/s", "peak/s"],
        rates,
    ));
    for s in sums {
        let lead = vec![f0(s.capacity), f0(s.offered_at_max), f0(s.peak)];
        t += &l.line(&cost_row(s, lead, n));
    }
    let name = |x: &Option<(f64, String)>| x.as_ref().map_or("-".to_owned(), |x| x.1.clone());
    let value = |x: &Option<(f64, String)>| x.as_ref().map(|x| x.0);
    let kernel_per_rate = (0..n).map(|i| {
        (
            value(k.cost.get(i).unwrap_or(&None)),
            value(k.own_cost.get(i).unwrap_or(&None)),
        )
    });
    t += &l.line(&ratio_row(
        "kernel=best",
        vec![f0(value(&k.capacity)), String::new(), f0(value(&k.peak))],
        kernel_per_rate,
        f1(value(&k.p99_us)),
    ));
    let ratio_per_rate = (0..n).map(|i| {
        (
            r.cost.get(i).and_then(|x| x.1),
            r.own_cost.get(i).and_then(|x| x.1),
        )
    });
    t += &l.line(&ratio_row(
        "steer/kernel",
        vec![f2(r.capacity), String::new(), f2(r.peak)],
        ratio_per_rate,
        f2(r.p99),
    ));
    let _ = writeln!(
        t,
        "kernel figures from: capacity {}, peak {}, own cost {}, p99 {}",
        name(&k.capacity),
        name(&k.peak),
        k.own_cost.iter().map(name).collect::<Vec<_>>().join(" / "),
        name(&k.p99_us)
    );
    let _ = writeln!(
        t,
        "steer capacity / raw AF_XDP turnaround: {} (target >= 0.80); steer cost at {}/s over cost at capacity: {} whole-machine, {} own (target <= 1.5)",
        f2(r.capacity_vs_afxdp),
        lat,
        f2(r.wakeup_tax),
        f2(r.wakeup_tax_own)
    );
    if sums.iter().any(|s| {
        (s.server == "kernel-echo" || s.server == "sockperf")
            && s.flags.iter().any(|f| f.starts_with("overload collapse"))
    }) {
        let _ = writeln!(
            t,
            "note: a kernel server collapses under overload, so capacity (at max) compares steer with a livelocked kernel; peak compares best with best"
        );
    }
    flag_lines(&mut t, sums);
    t
}

fn short(rate: u64) -> String {
    if rate.is_multiple_of(1000) {
        format!("{}k", rate / 1000)
    } else {
        rate.to_string()
    }
}

/// Which numbers are missing (for `--quick` and the exit status).
pub fn missing(sums: &[Summary]) -> Vec<String> {
    let mut m = Vec::new();
    for s in sums {
        if s.capacity.is_none() {
            m.push(format!("{}: capacity", s.server));
        }
        if s.server == "afxdp" {
            continue;
        }
        for (rate, c, _) in &s.cost {
            if c.is_none() {
                m.push(format!("{}: cost at {rate}/s", s.server));
            }
        }
        if s.p99_us.is_none() {
            m.push(format!("{}: latency", s.server));
        }
    }
    m
}

/// Everything `steer-bench run` reports from its server runs: the echo
/// servers' summaries, the kernel's best figures and steer's ratios; the
/// proxies' summaries (beside the reflector, whose cost is their floor)
/// and their ratios.
#[derive(Debug, Clone)]
pub struct Report {
    /// The echo servers' summaries (the reflector first when it ran).
    pub sums: Vec<Summary>,
    /// The kernel's best figures.
    pub kernel: KernelBest,
    /// steer over the kernel.
    pub ratios: Ratios,
    /// The reflector's and the proxies' summaries at the proxy rates.
    pub proxies: Vec<Summary>,
    /// steer's proxy over plain tokio.
    pub proxy_ratios: ProxyRatios,
    echo: bool,
    proxy: bool,
    rates: Vec<u64>,
    proxy_rates: Vec<u64>,
    runs: usize,
}

impl Report {
    /// The report of `runs` (`nruns` interleaved runs of `servers`), the
    /// echo servers at `rates`, the proxies at `proxy_rates`.
    pub fn of(
        servers: &[Kind],
        runs: &[ServerRun],
        rates: &[u64],
        proxy_rates: &[u64],
        nruns: usize,
    ) -> Self {
        let (proxy_kinds, echo_kinds): (Vec<Kind>, Vec<Kind>) =
            servers.iter().partition(|k| k.is_proxy());
        let sums = summarize(&echo_kinds, runs, rates);
        let kernel = kernel_best(&sums, rates);
        let ratios = ratios(&sums, &kernel, rates);
        // The proxies' own cost subtracts the reflector's at their rates.
        let mut floor_and_proxies: Vec<Kind> = echo_kinds
            .iter()
            .copied()
            .filter(|&k| k == Kind::Reflector)
            .collect();
        floor_and_proxies.extend(&proxy_kinds);
        let proxies = summarize(&floor_and_proxies, runs, proxy_rates);
        let proxy_ratios = proxy_ratios(&proxies, proxy_rates);
        Report {
            sums,
            kernel,
            ratios,
            proxies,
            proxy_ratios,
            echo: !echo_kinds.is_empty(),
            proxy: !proxy_kinds.is_empty(),
            rates: rates.to_vec(),
            proxy_rates: proxy_rates.to_vec(),
            runs: nruns,
        }
    }

    /// The tables of the servers that ran, and what the generator offered
    /// the reflector.
    pub fn text(&self) -> String {
        let mut t = String::new();
        if self.echo {
            t += &table(
                &self.sums,
                &self.kernel,
                &self.ratios,
                &self.rates,
                self.runs,
            );
        }
        if self.proxy {
            t += &proxy_table(&self.proxies, &self.proxy_ratios, &self.proxy_rates);
        }
        if let Some(refl) = self.sums.iter().find(|s| s.server == "reflector") {
            let _ = writeln!(
                t,
                "generator: offered {}/s at --rate max against the reflector (answered {}/s)",
                f0(refl.offered_at_max),
                f0(refl.capacity)
            );
        }
        t
    }

    /// Where each server ran: one line each, the reflector once.
    pub fn ran_on(&self) -> String {
        let mut t = String::new();
        let proxies = self.proxies.iter().filter(|s| s.server != "reflector");
        for s in self.sums.iter().chain(proxies) {
            let _ = writeln!(t, "  {:<12} {}", s.server, s.ran_on);
        }
        t
    }

    /// The numbers not found ([`missing`] of both groups).
    pub fn missing(&self) -> Vec<String> {
        let mut m = missing(&self.sums);
        m.extend(missing(&self.proxies));
        m
    }

    /// The JSON document ([`json()`]).
    pub fn to_json(&self, config: Value, machine: Value, runs: &[ServerRun]) -> Value {
        json(
            config,
            machine,
            &self.sums,
            &self.kernel,
            &self.ratios,
            &self.proxies,
            &self.proxy_ratios,
            runs,
        )
    }
}

/// The per-flow table of one phase (`steer-bench load`): each flow's
/// sent, answered, lost, duplicated and reordered requests, then the
/// totals.
pub fn per_flow_table(flows: &[FlowCounts], total: &FlowCounts) -> String {
    let l = Layout::new(&[], &[6, 10, 10, 8, 6, 6]);
    let row = |name: String, f: &FlowCounts| {
        l.line(&[
            name,
            f.sent.to_string(),
            f.answered.to_string(),
            f.lost.to_string(),
            f.duplicated.to_string(),
            f.reordered.to_string(),
        ])
    };
    let mut t = l.line(&["flow", "sent", "answered", "lost", "dup", "reord"]);
    for (i, f) in flows.iter().enumerate() {
        t += &row(i.to_string(), f);
    }
    t + &row("all".into(), total)
}

/// steer's worker load and balancer from its `--stats-json`, when there.
pub fn steer_load_line(stats: &Value) -> Option<String> {
    let load = stats.get("worker_load")?;
    let busy: Vec<String> = load["busy"]
        .as_array()?
        .iter()
        .map(|b| {
            format!(
                "cpu {} {:.0}%",
                b["cpu"],
                b["busy"].as_f64().unwrap_or(0.0) * 100.0
            )
        })
        .collect();
    let b = &stats["balancer"];
    Some(format!(
        "steer workers busy: {} (max/mean {:.2}); balancer {}: {} moves, {} elephants",
        busy.join(", "),
        load["max_over_mean"].as_f64().unwrap_or(0.0),
        if b["on"] == true { "on" } else { "off" },
        b["moves"],
        b["elephants"],
    ))
}

/// The JSON document.
#[allow(clippy::too_many_arguments)]
pub fn json(
    config: Value,
    machine: Value,
    sums: &[Summary],
    k: &KernelBest,
    r: &Ratios,
    proxies: &[Summary],
    pr: &ProxyRatios,
    runs: &[ServerRun],
) -> Value {
    let named = |x: &Option<(f64, String)>| {
        x.as_ref()
            .map_or(Value::Null, |(v, s)| json!({"value": v, "server": s}))
    };
    let summarize = |sums: &[Summary]| -> Vec<Value> {
        sums.iter()
            .map(|s| {
                json!({
                    "server": s.server, "runs": s.runs, "runs_ok": s.runs_ok,
                    "capacity_pps": s.capacity, "offered_at_max_pps": s.offered_at_max,
                    "peak_pps": s.peak, "us_per_reply_at_max": s.cpu_us_at_max,
                    "cost": s.cost.iter().map(|(rate, us, own)| json!({
                        "rate_pps": rate, "us_per_reply": us, "own_us_per_reply": own,
                    })).collect::<Vec<_>>(),
                    "latency_us": {"p50": s.p50_us, "p99": s.p99_us, "p99_9": s.p999_us},
                    "flags": s.flags, "ran_on": s.ran_on,
                })
            })
            .collect()
    };
    let per_rate = |v: &[(u64, Option<f64>)]| {
        v.iter()
            .map(|(rate, x)| json!({"rate_pps": rate, "ratio": x}))
            .collect::<Vec<_>>()
    };
    json!({
        "tool": "steer-bench",
        "format": 1,
        "config": config,
        "machine": machine,
        "summary": summarize(sums),
        "kernel_best": {
            "capacity_pps": named(&k.capacity),
            "peak_pps": named(&k.peak),
            "us_per_reply": k.cost.iter().map(named).collect::<Vec<_>>(),
            "own_us_per_reply": k.own_cost.iter().map(named).collect::<Vec<_>>(),
            "p99_us": named(&k.p99_us),
        },
        "ratios_steer_over_kernel": {
            "capacity": r.capacity, "peak": r.peak,
            "us_per_reply": per_rate(&r.cost), "own_us_per_reply": per_rate(&r.own_cost),
            "p99": r.p99,
        },
        "steer_capacity_over_afxdp": r.capacity_vs_afxdp,
        "steer_wakeup_tax": r.wakeup_tax,
        "steer_wakeup_tax_own": r.wakeup_tax_own,
        "proxies": {
            "summary": summarize(proxies),
            "ratios_steer_over_tokio": {
                "capacity": pr.capacity, "us_per_reply": per_rate(&pr.cost),
                "own_us_per_reply": per_rate(&pr.own_cost), "p99": pr.p99,
            },
        },
        "runs": runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::Latency;

    fn phase(asked: Option<f64>, offered: f64, answered: f64, us: f64, p99: f64) -> PhaseResult {
        let sent = (offered * 3.0) as u64;
        let got = (answered * 3.0) as u64;
        PhaseResult {
            window_secs: 3.0,
            answered_pps: answered,
            total: FlowCounts {
                sent,
                answered: got,
                lost: sent - got,
                ..FlowCounts::default()
            },
            latency: Some(Latency {
                count: got,
                p50_us: p99 / 2.0,
                p99_us: p99,
                p999_us: p99 * 2.0,
                max_us: p99 * 3.0,
            }),
            cpu_us_per_reply: Some(us),
            ..crate::gen::test_phase(asked, offered, &[0.5, 0.5])
        }
    }

    fn run(n: usize, kind: Kind, phases: Vec<(&str, PhaseResult)>) -> ServerRun {
        ServerRun {
            run: n,
            server: kind,
            error: None,
            phases: phases.into_iter().map(|(a, b)| (a.to_owned(), b)).collect(),
            ran_on: String::new(),
            last_words: String::new(),
            stats: None,
        }
    }

    #[test]
    fn the_per_flow_table_and_the_load_line() {
        let f = |sent, answered| FlowCounts {
            sent,
            answered,
            lost: sent - answered,
            ..FlowCounts::default()
        };
        let t = per_flow_table(&[f(10, 9), f(5, 5)], &f(15, 14));
        assert_eq!(
            t,
            "  flow       sent   answered     lost    dup  reord\n     0         10          9        1      0      0\n     1          5          5        0      0      0\n   all         15         14        1      0      0\n"
        );
        let stats = json!({"worker_load": {"busy": [{"cpu": 0, "busy": 0.5}, {"cpu": 1, "busy": 0.25}],
            "max_over_mean": 1.333}, "balancer": {"on": true, "moves": 3, "elephants": 1}});
        assert_eq!(
            steer_load_line(&stats).unwrap(),
            "steer workers busy: cpu 0 50%, cpu 1 25% (max/mean 1.33); balancer on: 3 moves, 1 elephants"
        );
        assert_eq!(steer_load_line(&json!({})), None);
        assert_eq!(steer_load_line(&json!({"worker_load": {}})), None);
    }

    #[test]
    fn medians_own_cost_kernel_best_and_ratios() {
        let rates = [50_000, 200_000];
        let mut runs = Vec::new();
        for n in 1..=3 {
            let j = n as f64; // varies per run: medians pick run 2
            runs.push(run(
                n,
                Kind::Reflector,
                vec![
                    ("max", phase(None, 600e3, 600e3, 2.0, 50.0)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 3.0 + j, 20.0)),
                    ("200000", phase(Some(2e5), 2e5, 2e5, 2.0, 30.0)),
                ],
            ));
            runs.push(run(
                n,
                Kind::Steer,
                vec![
                    ("max", phase(None, 500e3, 400e3 + j, 4.0, 900.0)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 10.0 + j, 80.0 + j)),
                    ("200000", phase(Some(2e5), 2e5, 2e5, 5.0, 90.0)),
                ],
            ));
            runs.push(run(
                n,
                Kind::KernelEcho,
                vec![
                    ("max", phase(None, 1.5e6, 5e3, 400.0, 9e5)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 8.0, 100.0)),
                    ("200000", phase(Some(2e5), 2e5, 1.9e5, 6.0, 4e4)),
                ],
            ));
            runs.push(run(
                n,
                Kind::Sockperf,
                vec![
                    ("max", phase(None, 1.5e6, 2e3, 900.0, 9e5)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 7.0, 150.0)),
                    ("200000", phase(Some(2e5), 2e5, 1.6e5, 8.0, 1e3)),
                ],
            ));
        }
        let kinds = [
            Kind::Reflector,
            Kind::Steer,
            Kind::KernelEcho,
            Kind::Sockperf,
        ];
        let sums = summarize(&kinds, &runs, &rates);
        let steer = &sums[1];
        assert_eq!(steer.capacity, Some(400e3 + 2.0));
        assert_eq!(steer.cost[0], (50_000, Some(12.0), Some(12.0 - 5.0)));
        assert_eq!(steer.p99_us, Some(82.0));
        let kernel = &sums[2];
        assert_eq!(kernel.peak, Some(1.9e5));
        assert!(
            kernel
                .flags
                .iter()
                .any(|f| f.starts_with("overload collapse")),
            "{:?}",
            kernel.flags
        );
        assert!(
            kernel.flags.iter().any(|f| f.contains("lost 5.0%")),
            "{:?}",
            kernel.flags
        );
        let k = kernel_best(&sums, &rates);
        assert_eq!(k.capacity, Some((5e3, "kernel-echo".into())));
        assert_eq!(k.own_cost[0], Some((7.0 - 5.0, "sockperf".into())));
        assert_eq!(k.p99_us, Some((100.0, "kernel-echo".into())));
        let r = ratios(&sums, &k, &rates);
        assert!((r.peak.unwrap() - (400e3 + 2.0) / 1.9e5).abs() < 1e-9);
        assert!((r.own_cost[0].1.unwrap() - 7.0 / 2.0).abs() < 1e-9);
        assert!((r.wakeup_tax.unwrap() - 12.0 / 4.0).abs() < 1e-9);
        // Own: (12 - 5) at 50k over (4 - 2) at max.
        assert!((r.wakeup_tax_own.unwrap() - 7.0 / 2.0).abs() < 1e-9);
        assert!(missing(&sums).is_empty(), "{:?}", missing(&sums));
        let j = json(
            json!({}),
            json!({}),
            &sums,
            &k,
            &r,
            &[],
            &ProxyRatios::default(),
            &runs,
        );
        assert_eq!(j["summary"][1]["cost"][0]["own_us_per_reply"], json!(7.0));
        assert_eq!(
            j["kernel_best"]["own_us_per_reply"][0]["server"],
            json!("sockperf")
        );
        assert_eq!(
            j["ratios_steer_over_kernel"]["own_us_per_reply"][0]["rate_pps"],
            json!(50_000)
        );
        let t = table(&sums, &k, &r, &rates, 3);
        // The columns line up under the head, dashes for what is missing.
        for line in [
            "server        capacity/s   offered/s    peak/s     us@50k      own    us@200k      own   p50 us   p99 us p99.9 us\n",
            "steer             400002      500000    400002      12.00     7.00       5.00     3.00     41.0     82.0    164.0\n",
            "kernel=best         5000                190000       7.00     2.00       6.00     4.00             100.0\n",
            "steer/kernel       80.00                  2.11       1.71     3.50       0.83     0.75              0.82\n",
            "steer capacity / raw AF_XDP turnaround: - (target >= 0.80)",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
        assert!(
            t.contains("steer/kernel") && t.contains("note: a kernel server collapses"),
            "{t}"
        );
    }

    #[test]
    fn a_report_puts_the_reflector_beside_both_groups() {
        let rates = [50_000];
        let phases = |cpu: f64| {
            vec![
                ("max", phase(None, 6e5, 5e5, cpu, 50.0)),
                ("50000", phase(Some(5e4), 5e4, 5e4, cpu + 1.0, 20.0)),
            ]
        };
        let kinds = [
            Kind::Reflector,
            Kind::Steer,
            Kind::SteerProxy,
            Kind::KernelProxy,
        ];
        let runs: Vec<ServerRun> = kinds
            .iter()
            .enumerate()
            .map(|(i, &k)| run(1, k, phases(2.0 + i as f64)))
            .collect();
        let rep = Report::of(&kinds, &runs, &rates, &rates, 1);
        let names = |v: &[Summary]| v.iter().map(|s| s.server.clone()).collect::<Vec<_>>();
        assert_eq!(names(&rep.sums), ["reflector", "steer"]);
        assert_eq!(
            names(&rep.proxies),
            ["reflector", "steer-proxy", "kernel-proxy"]
        );
        // Own cost at 50k: the proxy's 5 us minus the reflector's 3 us.
        assert_eq!(rep.proxies[1].cost[0], (50_000, Some(5.0), Some(2.0)));
        assert!((rep.proxy_ratios.cost[0].1.unwrap() - 5.0 / 6.0).abs() < 1e-9);
        let t = rep.text();
        assert!(t.contains("\nmedians of 1 interleaved run(s)"), "{t}");
        assert!(t.contains("\nproxies (a reply"), "{t}");
        assert!(t.contains("generator: offered 600000/s at --rate max against the reflector (answered 500000/s)"), "{t}");
        assert_eq!(rep.ran_on().lines().count(), 4, "the reflector once");
        // No kernel server ran: its figures are missing, nothing else.
        assert!(rep.missing().is_empty(), "{:?}", rep.missing());
        let j = rep.to_json(json!({}), json!({}), &runs);
        assert_eq!(j["proxies"]["summary"][2]["server"], "kernel-proxy");
        // Proxies alone: no echo table.
        let alone = Report::of(&[Kind::SteerProxy], &runs[2..3], &rates, &rates, 1);
        assert!(!alone.text().contains("medians of"), "{}", alone.text());
        assert!(alone.text().contains("steer-proxy"));
    }

    #[test]
    fn the_proxies_are_compared_with_each_other() {
        let rates = [50_000];
        let runs = vec![
            run(
                1,
                Kind::Reflector,
                vec![
                    ("max", phase(None, 6e5, 6e5, 2.0, 50.0)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 3.0, 20.0)),
                ],
            ),
            run(
                1,
                Kind::SteerProxy,
                vec![
                    ("max", phase(None, 3e5, 2e5, 6.0, 900.0)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 9.0, 120.0)),
                ],
            ),
            run(
                1,
                Kind::KernelProxy,
                vec![
                    ("max", phase(None, 3e5, 1e5, 8.0, 900.0)),
                    ("50000", phase(Some(5e4), 5e4, 5e4, 12.0, 150.0)),
                ],
            ),
        ];
        let sums = summarize(
            &[Kind::Reflector, Kind::SteerProxy, Kind::KernelProxy],
            &runs,
            &rates,
        );
        let r = proxy_ratios(&sums, &rates);
        assert!((r.cost[0].1.unwrap() - 9.0 / 12.0).abs() < 1e-9);
        assert!((r.own_cost[0].1.unwrap() - 6.0 / 9.0).abs() < 1e-9);
        assert!((r.capacity.unwrap() - 2.0).abs() < 1e-9);
        assert!((r.p99.unwrap() - 120.0 / 150.0).abs() < 1e-9);
        let t = proxy_table(&sums, &r, &rates);
        for line in [
            "proxy         capacity/s   offered/s     us@50k      own   p50 us   p99 us p99.9 us\n",
            "steer-proxy       200000      300000       9.00     6.00     60.0    120.0    240.0\n",
            "steer/tokio         2.00                   0.75     0.67              0.80\n",
            "proxy          cpu@50k   backend     vol     all  machine\n",
            "steer-proxy          -         -       -       -        -\n",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
        assert!(
            !t.contains("\nreflector          -"),
            "no process row for the floor\n{t}"
        );
        assert!(t.contains("steer/tokio") && t.contains("0.75"), "{t}");
        let k = kernel_best(&[], &[]);
        let j = json(
            json!({}),
            json!({}),
            &[],
            &k,
            &ratios(&[], &k, &[]),
            &sums,
            &r,
            &runs,
        );
        assert_eq!(
            j["proxies"]["ratios_steer_over_tokio"]["us_per_reply"][0]["ratio"],
            json!(0.75)
        );
        assert_eq!(j["proxies"]["summary"][2]["server"], json!("kernel-proxy"));
    }

    #[test]
    fn flags_and_missing_numbers() {
        let rates = [50_000];
        let mut p = phase(Some(5e4), 4e4, 4e4, 9.0, 100.0);
        p.total.reordered = 3;
        assert!(phase_flags(&p)
            .iter()
            .any(|f| f.starts_with("RATE NOT HELD")));
        assert!(phase_flags(&p).iter().any(|f| f == "3 reordered"));
        let mut max = phase(None, 5e5, 4.9e5, 4.0, 900.0);
        max.total.reordered = 1;
        let runs = vec![
            run(1, Kind::Steer, vec![("max", max.clone()), ("50000", p)]),
            run(1, Kind::Reflector, vec![("max", max)]),
            ServerRun {
                error: Some("did not start".into()),
                ..run(1, Kind::Sockperf, vec![])
            },
        ];
        let sums = summarize(
            &[Kind::Steer, Kind::Reflector, Kind::Sockperf],
            &runs,
            &rates,
        );
        assert_eq!(sums[0].capacity, None, "reordered: no clean capacity");
        assert_eq!(
            sums[1].capacity,
            Some(4.9e5),
            "the reflector's stands, flagged"
        );
        assert!(sums[1].flags.iter().any(|f| f.contains("generator-bound")));
        let m = missing(&sums);
        assert!(m.contains(&"steer: capacity".to_owned()), "{m:?}");
        assert!(m.contains(&"sockperf: latency".to_owned()), "{m:?}");
        assert!(sums[2].flags.iter().any(|f| f.contains("did not start")));
    }
}
