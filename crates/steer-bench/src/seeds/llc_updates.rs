//! `steer-bench seed llc-updates` (seed 000, "net: reduce RFS/ARFS flow
//! updates by checking LLC affinity"):
//! steering-hook calls per second and the proxy's CPU time under tokio
//! work-stealing with many flows, policy `always` (every change of a flow's
//! consuming CPU rewrites its entry, as the kernel does today) against `llc`
//! (only changes that cross a last-level cache, or are forced, are written).
//!
//! What it runs. `steer proxy --runtime multi` (one tokio multi-thread
//! runtime: flows' tasks are work-stolen between threads and every read
//! records the reading thread's CPU) on the root-namespace end of a fresh
//! 2-queue veth pair, forwarding to a kernel `sockperf server` on
//! 127.0.0.1. The generator ([`udp_flows`](super::udp_flows)) drives it
//! from the namespace: `--flows` UDP sockets, closed loop, `--window`
//! sockperf pong requests in flight per flow. Four configurations, each
//! with a fresh proxy:
//!
//! ```text
//! real     x always | llc   the machine's topology (here: 2 CPUs, ONE LLC)
//! override x always | llc   --topology "pack:2 l3:1 core:1 pu:1": the LLC
//!                           rule sees CPU 0 and CPU 1 in different LLCs
//!                           (the workers stay pinned to the real CPUs)
//! ```
//!
//! Counters are read through the proxy's `stats` stdin command after a
//! warm-up and at the end of the measured window; CPU time is utime+stime
//! of the proxy process over that window. Whole-run counters come from
//! `--stats-json`.
//!
//! Columns. dgram/s: datagrams the proxy received per second (window);
//! hook/s: steering-hook calls per second (window); hooks(run):
//! steering_updates over the whole run; upd/s, supp/s: desired-table
//! writes and suppressed records per second of traffic (whole run);
//! cross_llc, other: desired-table writes by reason (whole run; `other` =
//! new_or_other_flow); coll: `other` writes beyond one per flow (live flows
//! sharing a slot of the desired-CPU table); cpu: proxy CPU s/s; ms/1k:
//! proxy CPU ms per 1000 datagrams.
//!
//! Goal: on the real topology `llc` makes at least 95% fewer steering-hook
//! calls per second than `always`; on the override, `llc` still follows
//! flows that cross the two "LLCs" (cross_llc writes > 0 and hook calls >
//! 0).

use crate::table::Layout;
use std::{
    fmt::Write as _,
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{
    find_run,
    harness::{self, Harness},
    result_doc, sort_runs,
    udp_flows::FlowsConfig,
    Outcome, SteerRun,
};
use crate::netns::TestBed;
use crate::num::{fewer_pct, fixed, jnum, jopt, num, raw};
use crate::procs::{Proc, Spawn};

/// The JSON `tool` of this seed.
pub const TOOL: &str = "steer-bench seed 000";
/// What results of the shell script call it.
pub const OLD_TOOL: &str = "benches/seeds/seed000-llc-steering.sh";
const GOAL_PCT: f64 = 95.0;

/// `steer-bench seed llc-updates`.
#[derive(Debug, Clone, Args)]
pub struct LlcUpdates {
    /// Measured window per configuration, seconds.
    #[arg(short = 't', long = "time", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub secs: u64,
    /// CI smoke: 3 s windows after a 1 s warm-up (too short for the goal).
    #[arg(long)]
    pub quick: bool,
    /// Concurrent flows.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub flows: u16,
    /// Requests in flight per flow.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub window: u16,
    /// Traffic before the window opens, seconds.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// steer proxy's task layout.
    #[arg(long, default_value = "multi", value_parser = ["multi", "per-core"])]
    pub runtime: String,
    /// The 2-LLC topology.
    #[arg(long = "override", default_value = "pack:2 l3:1 core:1 pu:1")]
    pub override_spec: String,
    /// Run one topology only.
    #[arg(long, value_parser = ["real", "override"])]
    pub only: Option<String>,
    /// Exit 3 unless the goal is met.
    #[arg(long)]
    pub require_goal: bool,
    /// The `steer` command, output, runs, source tree.
    #[command(flatten)]
    pub run: SteerRun,
}

/// The topologies a document's run covered.
fn topologies(doc: &Value) -> Vec<&'static str> {
    match doc.pointer("/config/only").and_then(Value::as_str) {
        Some("real") => vec!["real"],
        Some("override") => vec!["override"],
        _ => vec!["real", "override"],
    }
}

fn run_of<'a>(doc: &'a Value, topo: &str, policy: &str) -> Option<&'a Value> {
    find_run(&doc["runs"], |r| {
        r["topology"] == topo && r["policy"] == policy
    })
}

/// Percent fewer hook calls/s under llc than under always, one decimal.
pub fn reduction(doc: &Value, topo: &str) -> Option<String> {
    let rate = |p| run_of(doc, topo, p).and_then(|r| num(r, "/window/hook_calls_per_s"));
    fewer_pct(rate("llc"), rate("always"))
}

fn goal_real(doc: &Value) -> bool {
    reduction(doc, "real")
        .and_then(|r| r.parse::<f64>().ok())
        .is_some_and(|r| r >= GOAL_PCT)
}

fn goal_override(doc: &Value) -> bool {
    let r = run_of(doc, "override", "llc");
    let cross = r.and_then(|r| num(r, "/run/by_reason/cross_llc"));
    let hooks = r.and_then(|r| num(r, "/window/hook_calls"));
    cross.is_some_and(|c| c > 0.0) && hooks.is_some_and(|h| h > 0.0)
}

/// The table the seed prints, from its JSON document.
pub fn table(doc: &Value) -> String {
    let c = &doc["config"];
    let mut t = String::new();
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "seed 000: steer proxy --runtime {}, {} flows x {} in flight, {}s window after {}s warm-up, {} CPUs",
        raw(c.get("runtime")),
        raw(c.get("flows")),
        raw(c.get("window")),
        raw(c.get("seconds")),
        raw(c.get("warmup")),
        raw(doc.pointer("/host/cpus"))
    );
    let _ = writeln!(
        t,
        "override topology: \"{}\"; window columns: dgram/s hook/s cpu ms/1k; run columns: hooks(run) upd/s supp/s cross_llc other",
        raw(c.get("override"))
    );
    let layout = Layout::new(&[9, 7], &[8, 8, 10, 8, 8, 9, 7, 6, 5, 6]);
    let row = |t: &mut String, v: [&str; 12]| t.push_str(&layout.line(&v));
    row(
        &mut t,
        [
            "topology",
            "policy",
            "dgram/s",
            "hook/s",
            "hooks(run)",
            "upd/s",
            "supp/s",
            "cross_llc",
            "other",
            "coll",
            "cpu",
            "ms/1k",
        ],
    );
    let topos = topologies(doc);
    for topo in &topos {
        for policy in ["always", "llc"] {
            let Some(r) = run_of(doc, topo, policy) else {
                let d = "-";
                row(
                    &mut t,
                    [topo, policy, d, d, d, d, d, d, d, d, d, "-  (no numbers)"],
                );
                continue;
            };
            row(
                &mut t,
                [
                    topo,
                    policy,
                    &fixed(num(r, "/window/rx_per_s"), 0),
                    &fixed(num(r, "/window/hook_calls_per_s"), 1),
                    &raw(r.pointer("/run/steering_updates")),
                    &fixed(num(r, "/run/desired_updates_per_s"), 1),
                    &fixed(num(r, "/run/suppressed_per_s"), 0),
                    &raw(r.pointer("/run/by_reason/cross_llc")),
                    &raw(r.pointer("/run/by_reason/new_or_other_flow")),
                    &raw(r.pointer("/run/collision_writes")),
                    &fixed(num(r, "/window/cpu_s_per_s"), 2),
                    &fixed(num(r, "/window/cpu_ms_per_1k"), 2),
                ],
            );
        }
    }
    for topo in &topos {
        let red = match reduction(doc, topo) {
            None => "-% fewer".to_owned(),
            Some(r) => match r.strip_prefix('-') {
                Some(more) => format!("{more}% MORE"),
                None => format!("{r}% fewer"),
            },
        };
        let get = |p, ptr| run_of(doc, topo, p).and_then(|r| num(r, ptr));
        let _ = writeln!(
            t,
            "{topo}: llc vs always: {red} steering-hook calls/s ({} -> {}); CPU ms/1k dgrams {} -> {}",
            fixed(get("always", "/window/hook_calls_per_s"), 1),
            fixed(get("llc", "/window/hook_calls_per_s"), 1),
            fixed(get("always", "/window/cpu_ms_per_1k"), 2),
            fixed(get("llc", "/window/cpu_ms_per_1k"), 2)
        );
    }
    if let Some(r) = run_of(doc, "real", "llc") {
        let coll = num(r, "/run/collision_writes").unwrap_or(0.0);
        if coll > 0.0 {
            let forced: f64 = ["cross_llc", "forced_offline", "forced_affinity"]
                .iter()
                .filter_map(|k| num(r, &format!("/run/by_reason/{k}")))
                .sum();
            let _ = writeln!(
                t,
                "real-llc: {} desired-table writes were slot collisions between live flows (the LLC rule cannot suppress those; cross-LLC and forced writes: {}): the source of its remaining hook calls",
                raw(r.pointer("/run/collision_writes")),
                crate::num::shortest(forced)
            );
        }
    }
    if topos.contains(&"real") {
        let _ = if goal_real(doc) {
            writeln!(t, "goal (real): met, >= {GOAL_PCT}% fewer hook calls")
        } else {
            writeln!(t, "goal (real): NOT met (>= {GOAL_PCT}% fewer hook calls)")
        };
    }
    if topos.contains(&"override") {
        let r = run_of(doc, "override", "llc");
        let _ = if goal_override(doc) {
            writeln!(
                t,
                "goal (override): met, cross-LLC moves still followed (cross_llc writes {}, {} hook calls in the window)",
                raw(r.and_then(|r| r.pointer("/run/by_reason/cross_llc"))),
                raw(r.and_then(|r| r.pointer("/window/hook_calls")))
            )
        } else {
            writeln!(
                t,
                "goal (override): NOT met (cross_llc writes and hook calls must be > 0 under llc)"
            )
        };
    }
    let _ = writeln!(t);
    t
}

/// What one configuration measured, beyond the proxy's own counters.
struct Window {
    seconds: f64,
    cpu_s: f64,
    proxy_exit: i32,
    generator: Option<super::udp_flows::FlowsResult>,
}

/// One configuration's result, as the JSON's `runs[]` holds it.
fn result_json(
    topo: &str,
    spec: Option<&str>,
    policy: &str,
    s0: &Value,
    s1: &Value,
    fin: &Value,
    w: &Window,
) -> Value {
    let (a, b) = (&s0["total"], &s1["total"]);
    let diff = |k: &str| Some(num(b, &format!("/{k}"))? - num(a, &format!("/{k}"))?);
    let rx = diff("rx");
    let hooks = diff("hook_calls");
    let dropped = num(b, "/dropped").unwrap_or(0.0) - num(a, "/dropped").unwrap_or(0.0);
    let per_win = |v: Option<f64>| v.map(|v| v / w.seconds);
    let traffic = w
        .generator
        .as_ref()
        .map(|g| g.elapsed_s)
        .filter(|&s| s > 0.0);
    let per_traffic = |ptr: &str| Some(num(fin, ptr)? / traffic?);
    let collisions = num(fin, "/desired_table/by_reason/new_or_other_flow")
        .zip(num(fin, "/proxy/flows"))
        .map(|(o, f)| (o - f).max(0.0));
    let g = w.generator.as_ref();
    json!({
        "topology": topo,
        "spec": spec.unwrap_or("live"),
        "policy": policy,
        "window": {
            "seconds": w.seconds,
            "rx": jopt(rx),
            "hook_calls": jopt(hooks),
            "rx_per_s": jopt(per_win(rx)),
            "hook_calls_per_s": jopt(per_win(hooks)),
            "held_back": jopt(diff("held_back")),
            "dropped": jnum(dropped),
            "cpu_s": jnum(w.cpu_s),
            "cpu_s_per_s": jnum(w.cpu_s / w.seconds),
            "cpu_ms_per_1k": jopt(rx.filter(|&r| r > 0.0).map(|r| w.cpu_s * 1000.0 / (r / 1000.0))),
        },
        "run": {
            "traffic_s": jopt(traffic),
            "steering_updates": fin["steering_updates"],
            "desired_updates": fin["desired_table"]["updates"],
            "desired_suppressed": fin["desired_table"]["suppressed"],
            "desired_updates_per_s": jopt(per_traffic("/desired_table/updates")),
            "suppressed_per_s": jopt(per_traffic("/desired_table/suppressed")),
            "by_reason": fin["desired_table"]["by_reason"],
            "rx": fin["total"]["rx"],
            "drops": fin["total"]["drops"],
            "collision_writes": jopt(collisions),
            "proxy": fin["proxy"],
            "proxy_exit": w.proxy_exit,
        },
        "generator": {
            "sent": g.map(|g| g.sent),
            "received": g.map(|g| g.received),
            "flows_answered": g.map(|g| g.flows_answered),
        },
        "final_stats": fin,
    })
}

/// Asks `steer proxy` for its counters (stdin `stats`) and returns the
/// `stats` object of the line it prints
/// (`{"desired_table":{...},"stats":{"per_cpu":[...],"total":{...}}}`);
/// `None` after 5 s.
fn proxy_stats(proxy: &mut Proc) -> Option<Value> {
    let lines = |p: &Proc| -> Vec<String> {
        std::fs::read_to_string(&p.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("{\"desired_table\""))
            .map(str::to_owned)
            .collect()
    };
    let before = lines(proxy).len();
    if !proxy.send_line("stats") {
        return None;
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let now = lines(proxy);
        if now.len() > before {
            let v: Value = serde_json::from_str(now.last()?).ok()?;
            return Some(v["stats"].clone());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

struct Bed<'a> {
    h: &'a Harness,
    bed: &'a TestBed,
    steer: &'a Path,
    port: u16,
    backend_port: u16,
}

fn run_config(
    a: &LlcUpdates,
    b: &Bed<'_>,
    topo: &str,
    policy: &str,
    spec: Option<&str>,
) -> Result<Option<Value>> {
    let h = b.h;
    let tag = format!("{topo}-{policy}");
    let fin_path = h.path(&format!("{tag}-final.json"));
    let mut argv: Vec<String> = vec![
        b.steer.to_string_lossy().into_owned(),
        "proxy".into(),
        "--interface".into(),
        b.bed.host_if.clone(),
        "--port".into(),
        b.port.to_string(),
        "--backend".into(),
        format!("127.0.0.1:{}", b.backend_port),
        "--policy".into(),
        policy.into(),
        "--runtime".into(),
        a.runtime.clone(),
        "--stats-json".into(),
        fin_path.to_string_lossy().into_owned(),
    ];
    if let Some(s) = spec {
        argv.extend(["--topology".into(), s.into()]);
    }
    h.log(&format!(
        "{tag}: steer proxy --policy {policy}{}, {}s warm-up + {}s",
        spec.map(|s| format!(" --topology \"{s}\""))
            .unwrap_or_default(),
        a.warmup,
        a.secs
    ));
    let log = h.path(&format!("{tag}-proxy.log"));
    let mut proxy = Proc::spawn(
        "steer proxy",
        &argv,
        &log,
        &Spawn {
            stdin: true,
            ..Spawn::default()
        },
    )?;
    proxy
        .wait_ready(Duration::from_secs(60))
        .with_context(|| format!("{tag}: steer proxy did not start"))?;
    let gen = super::spawn_generator(
        b.bed,
        FlowsConfig {
            dst: SocketAddr::from((b.bed.host_v4, b.port)),
            flows: a.flows.into(),
            window: a.window.into(),
            size: 64,
            duration: Duration::from_secs_f64((a.warmup + a.secs) as f64 + 0.5),
            stall: Duration::from_millis(200),
        },
        None,
        h.stop_flag(),
    );
    h.sleep(Duration::from_secs(a.warmup))?;
    let t0 = Instant::now();
    let c0 = proxy.cpu_ticks();
    let s0 = proxy_stats(&mut proxy);
    if s0.is_none() {
        h.log(&format!(
            "{tag}: no stats from the proxy at the window's start"
        ));
    }
    h.sleep(Duration::from_secs(a.secs))?;
    let s1 = proxy_stats(&mut proxy);
    if s1.is_none() {
        h.log(&format!(
            "{tag}: no stats from the proxy at the window's end"
        ));
    }
    let c1 = proxy.cpu_ticks();
    let seconds = t0.elapsed().as_secs_f64();
    let generator = super::join_generator(h, &tag, gen);
    proxy.send_line("quit");
    let (rc, _) = proxy.wait_exit(Duration::from_secs(15))?;
    if rc != 0 {
        h.log(&format!(
            "{tag}: steer proxy exited with {rc}: {}",
            crate::procs::tail(&log, 2)
        ));
    }
    let fin = crate::servers::read_json(&fin_path);
    let (Some(s0), Some(s1), Some(fin)) = (s0, s1, fin) else {
        h.log(&format!("{tag}: missing counters (see --keep-logs)"));
        return Ok(None);
    };
    let cpu_s = match (c0, c1) {
        (Some(c0), Some(c1)) => c1.saturating_sub(c0) as f64 / harness::clk_tck(),
        _ => 0.0,
    };
    let w = Window {
        seconds,
        cpu_s,
        proxy_exit: rc,
        generator,
    };
    Ok(Some(result_json(topo, spec, policy, &s0, &s1, &fin, &w)))
}

/// One run of the seed: every configuration, the table and the JSON.
pub fn run_once(a: &LlcUpdates, h: &Harness) -> Result<Outcome> {
    let mut a = a.clone();
    if a.quick {
        a.secs = 3;
        a.warmup = 1;
    }
    harness::require_root("network namespaces, veth pairs, XDP programs, AF_XDP sockets")?;
    harness::require_tool("sockperf")?;
    harness::require_tool("ip")?;
    let (steer, src) = a.run.paths()?;
    let bed = TestBed::create(2)?;
    let port = harness::free_udp_port(7000)?;
    let backend_port = harness::free_udp_port(17000)?;
    let mut backend = super::start_backend(h, backend_port)?;
    let topology = harness::steer_topology(&steer);
    h.log(&format!(
        "netns {}: {} {}:{port} <- {} flows from {}; backend sockperf server 127.0.0.1:{backend_port}; topology: {}",
        bed.ns,
        bed.host_if,
        bed.host_v4,
        a.flows,
        bed.peer_v4,
        if topology.is_empty() { "?" } else { &topology }
    ));
    let b = Bed {
        h,
        bed: &bed,
        steer: &steer,
        port,
        backend_port,
    };
    let topos: Vec<&str> = match a.only.as_deref() {
        Some("real") => vec!["real"],
        Some("override") => vec!["override"],
        _ => vec!["real", "override"],
    };
    let mut runs = Vec::new();
    let mut failed = false;
    for topo in &topos {
        let spec = (*topo == "override").then_some(a.override_spec.as_str());
        for policy in ["always", "llc"] {
            match run_config(&a, &b, topo, policy, spec)? {
                Some(r) => runs.push(r),
                None => failed = true,
            }
        }
    }
    let _ = backend.stop(Duration::from_secs(5));
    drop(bed);
    sort_runs(&mut runs, "topology", "policy");
    let mut doc = result_doc(
        TOOL,
        &src,
        json!({
            "config": {
                "seconds": a.secs,
                "warmup": a.warmup,
                "flows": a.flows,
                "window": a.window,
                "runtime": a.runtime,
                "override": a.override_spec,
                "machine_topology": topology,
                "only": a.only,
            },
            "runs": runs,
        }),
    );
    let red = |t| {
        reduction(&doc, t)
            .and_then(|r| r.parse::<f64>().ok())
            .map_or(Value::Null, jnum)
    };
    let reductions = json!({"real": red("real"), "override": red("override")});
    let goal = json!({"real_95pct_fewer": goal_real(&doc), "override_cross_llc_followed": goal_override(&doc)});
    doc["reduction_pct"] = reductions;
    doc["goal"] = goal;
    let goal_missed = a.require_goal
        && ((topos.contains(&"real") && !goal_real(&doc))
            || (topos.contains(&"override") && !goal_override(&doc)));
    Ok(Outcome::new(doc, table, failed, goal_missed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{committed_tables, result};

    #[test]
    fn tables_of_the_committed_results() {
        committed_tables("seed000-llc-steering", "table-seed000", table, |_, _| {});
    }

    #[test]
    fn goals_reductions_and_collisions() {
        let mut doc = result("seed000-llc-steering-1");
        assert_eq!(reduction(&doc, "real").as_deref(), Some("100.0"));
        assert_eq!(reduction(&doc, "override").as_deref(), Some("-15.5"));
        assert!(goal_real(&doc) && goal_override(&doc));
        // A real-llc run with collisions says where its hook calls come from.
        let runs = doc["runs"].as_array_mut().unwrap();
        let rl = runs
            .iter_mut()
            .find(|r| r["topology"] == "real" && r["policy"] == "llc")
            .unwrap();
        rl["run"]["collision_writes"] = json!(7);
        rl["window"]["hook_calls_per_s"] = json!(1000.0);
        let t = table(&doc);
        assert!(
            t.contains("real-llc: 7 desired-table writes were slot collisions"),
            "{t}"
        );
        assert!(t.contains("goal (real): NOT met"), "{t}");
        assert!(t.contains("real: llc vs always: 49.9% fewer"), "{t}");
        // Missing numbers are dashes, and the goal is not met.
        doc["runs"] = json!([]);
        let t = table(&doc);
        assert!(t.contains("-  (no numbers)"), "{t}");
        assert!(t.contains("real: llc vs always: -% fewer"), "{t}");
        assert!(t.contains("goal (override): NOT met"), "{t}");
        doc["config"]["only"] = json!("real");
        let t = table(&doc);
        assert!(
            !t.contains("\noverride  ") && !t.contains("goal (override)"),
            "{t}"
        );
    }

    #[test]
    fn results_from_counters() {
        let s0 = json!({"total": {"rx": 1000, "hook_calls": 10, "held_back": 1}});
        let s1 = json!({"total": {"rx": 21000, "hook_calls": 30, "held_back": 1, "dropped": 2}});
        let fin = json!({"steering_updates": 40, "total": {"rx": 30000, "drops": 0},
            "desired_table": {"updates": 50, "suppressed": 1000,
                "by_reason": {"new_or_other_flow": 130, "cross_llc": 0}},
            "proxy": {"flows": 128}});
        let w = Window {
            seconds: 2.0,
            cpu_s: 1.5,
            proxy_exit: 0,
            generator: Some(crate::seeds::udp_flows::FlowsResult {
                elapsed_s: 2.5,
                sent: 30000,
                received: 29000,
                flows_answered: 128,
                ..Default::default()
            }),
        };
        let r = result_json("real", None, "llc", &s0, &s1, &fin, &w);
        assert_eq!(r["spec"], "live");
        assert_eq!(r["window"]["rx"], json!(20000));
        assert_eq!(r["window"]["rx_per_s"], json!(10000));
        assert_eq!(r["window"]["hook_calls_per_s"], json!(10));
        assert_eq!(r["window"]["dropped"], json!(2));
        assert_eq!(r["window"]["cpu_ms_per_1k"], json!(75));
        assert_eq!(r["run"]["desired_updates_per_s"], json!(20));
        assert_eq!(r["run"]["suppressed_per_s"], json!(400));
        assert_eq!(r["run"]["collision_writes"], json!(2));
        assert_eq!(r["generator"]["received"], json!(29000));
        // No generator numbers: per-second run rates are null, not a guess.
        let w = Window {
            generator: None,
            ..w
        };
        let r = result_json("real", None, "llc", &s0, &s1, &fin, &w);
        assert!(r["run"]["desired_updates_per_s"].is_null());
        assert!(r["generator"]["sent"].is_null());
    }
}
