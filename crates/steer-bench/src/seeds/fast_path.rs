//! `steer-bench seed fast-path` (seed 003, "rps: process the skb directly if rps cpu not changed"): ring
//! enqueues per packet with steer's same-CPU fast path on and off when
//! flows are local (their target CPU is the CPU that received them). The
//! seed measured 50% fewer NET_RX softirqs on a 2-CPU guest; steer's analog
//! of the backlog enqueue is the dispatcher-to-worker ring enqueue
//! (steered_out + queued_local), which the fast path replaces by an inline
//! call when the flow's CPU is the dispatcher's own and nothing of the
//! flow is still queued (RFS's last_qtail rule).
//!
//! 1. End to end (root): `steer echo --sockperf` on the root-namespace end
//!    of a fresh 2-queue veth pair, `--fast-path on | off`, in two layouts
//!    where every flow is local: `1cpu` (`--cpus 0`, the generator pinned
//!    to CPU 1) and `2cpu` (`--cpus 0,1`, RPS auto = local; the generator
//!    not pinned). The generator ([`udp_flows`](super::udp_flows)): closed
//!    loop, `--window` requests in flight per flow. From the stats JSON:
//!    ring enqueues per packet = (steered_out + queued_local) / rx,
//!    fast-path share = fast_path / rx; replies per second (the
//!    generator's receive rate) and the echo's CPU microseconds per packet.
//! 2. criterion (benches/dispatch.rs): `steer/dispatch/fast_path/{on,off}`,
//!    the dispatcher alone, 64-packet batches of 256 flows desired on the
//!    dispatcher's CPU: median ns per packet, and the ring enqueues per
//!    packet the bench prints.
//!
//! Goal: with the fast path on, at least 50% fewer ring enqueues per packet
//! than off, for local flows (end to end and in the bench).

use crate::table::Layout;
use std::{fmt::Write as _, net::SocketAddr, path::Path, time::Duration};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{
    config_flag,
    criterion::{printed_enqueues, BenchRun},
    find_run,
    harness::{self, Harness},
    result_doc, sort_runs,
    udp_flows::{FlowsConfig, FlowsResult},
    Outcome, SteerRun,
};
use crate::netns::TestBed;
use crate::num::{div, fewer_pct, fixed, jnum, jopt, num, raw};
use crate::procs::{Proc, Spawn};

/// The JSON `tool` of this seed.
pub const TOOL: &str = "steer-bench seed 003";
/// What results of the shell script call it.
pub const OLD_TOOL: &str = "benches/seeds/seed003-fast-path.sh";
const GOAL_PCT: f64 = 50.0;
const FILTER: &str = "steer/dispatch/fast_path";

/// `steer-bench seed fast-path`.
#[derive(Debug, Clone, Args)]
pub struct FastPath {
    /// Traffic per end-to-end configuration, seconds.
    #[arg(short = 't', long = "time", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub secs: u64,
    /// CI smoke: 3 s per configuration, criterion 1 s warm-up / 2 s measurement.
    #[arg(long)]
    pub quick: bool,
    /// Flows.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub flows: u16,
    /// Requests in flight per flow.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub window: u16,
    /// End-to-end layouts.
    #[arg(long, value_delimiter = ',', default_value = "1cpu,2cpu", value_parser = ["1cpu", "2cpu"])]
    pub layouts: Vec<String>,
    /// Skip criterion.
    #[arg(long, conflicts_with = "criterion_only")]
    pub e2e_only: bool,
    /// Skip the end-to-end part (needs no root).
    #[arg(long)]
    pub criterion_only: bool,
    /// Exit 3 unless the goal is met.
    #[arg(long)]
    pub require_goal: bool,
    /// The `steer` command, output, runs, source tree.
    #[command(flatten)]
    pub run: SteerRun,
}

fn layouts(doc: &Value) -> Vec<String> {
    super::config_list(doc, "layouts", &["1cpu", "2cpu"])
}

fn e2e<'a>(doc: &'a Value, layout: &str, fp: &str) -> Option<&'a Value> {
    find_run(&doc["end_to_end"], |r| {
        r["layout"] == layout && r["fast_path"] == fp
    })
}

fn crit<'a>(doc: &'a Value, fp: &str) -> Option<&'a Value> {
    find_run(&doc["criterion"], |r| r["fast_path"] == fp)
}

fn get(r: Option<&Value>, key: &str) -> Option<f64> {
    r.and_then(|r| num(r, &format!("/{key}")))
}

fn layout_reduction(doc: &Value, l: &str) -> Option<String> {
    fewer_pct(
        get(e2e(doc, l, "on"), "ring_enqueues_per_packet"),
        get(e2e(doc, l, "off"), "ring_enqueues_per_packet"),
    )
}

fn crit_reduction(doc: &Value) -> Option<String> {
    fewer_pct(
        get(crit(doc, "on"), "ring_enqueues_per_packet"),
        get(crit(doc, "off"), "ring_enqueues_per_packet"),
    )
}

/// At least 50% fewer ring enqueues per packet with the fast path on, in
/// every layout and in criterion (the parts that ran).
pub fn goal_met(doc: &Value) -> bool {
    let enough = |r: Option<String>| {
        r.and_then(|r| r.parse::<f64>().ok())
            .is_some_and(|r| r >= GOAL_PCT)
    };
    let mut ok = true;
    if config_flag(doc, "e2e") {
        for l in layouts(doc) {
            ok &= enough(layout_reduction(doc, &l));
        }
    }
    if config_flag(doc, "criterion") {
        ok &= enough(crit_reduction(doc));
    }
    ok
}

/// The table the seed prints, from its JSON document.
pub fn table(doc: &Value) -> String {
    let c = &doc["config"];
    let mut t = String::new();
    let _ = writeln!(t);
    if config_flag(doc, "e2e") {
        let _ = writeln!(
            t,
            "seed 003 (end to end): steer echo --sockperf, {} local flows x {} in flight, {}s per run",
            raw(c.get("flows")),
            raw(c.get("window")),
            raw(c.get("seconds"))
        );
        let layout = Layout::new(&[6, 5], &[10, 9, 9, 10, 10, 9, 8]);
        let row = |t: &mut String, v: [&str; 9]| t.push_str(&layout.line(&v));
        row(
            &mut t,
            [
                "layout",
                "fast",
                "rx",
                "enq/pkt",
                "fast %",
                "ring enq",
                "replies/s",
                "cpu us/p",
                "drops",
            ],
        );
        for l in layouts(doc) {
            for fp in ["on", "off"] {
                let Some(r) = e2e(doc, &l, fp) else {
                    let d = "-";
                    row(&mut t, [&l, fp, d, d, d, d, d, d, "-  (no numbers)"]);
                    continue;
                };
                let r = Some(r);
                row(
                    &mut t,
                    [
                        &l,
                        fp,
                        &raw(r.and_then(|r| r.get("rx"))),
                        &fixed(get(r, "ring_enqueues_per_packet"), 3),
                        &fixed(get(r, "fast_path_share").map(|v| 100.0 * v), 1),
                        &raw(r.and_then(|r| r.get("ring_enqueues"))),
                        &fixed(get(r, "replies_per_s"), 0),
                        &fixed(get(r, "echo_cpu_us_per_packet"), 2),
                        &raw(r.and_then(|r| r.get("drops"))),
                    ],
                );
            }
            let (on, off) = (e2e(doc, &l, "on"), e2e(doc, &l, "off"));
            let _ = writeln!(
                t,
                "{l}: fast path on: {}% fewer ring enqueues per packet; replies/s {}x; CPU us/packet {} -> {}",
                layout_reduction(doc, &l).unwrap_or_default(),
                div(get(on, "replies_per_s"), get(off, "replies_per_s"), 2),
                fixed(get(off, "echo_cpu_us_per_packet"), 2),
                fixed(get(on, "echo_cpu_us_per_packet"), 2)
            );
        }
    }
    if config_flag(doc, "criterion") {
        let _ = writeln!(t);
        let _ = writeln!(t, "seed 003 (criterion, benches/dispatch.rs): steer/dispatch/fast_path, batches of 64 packets, flows on the dispatcher's CPU");
        let layout = Layout::new(&[28], &[10, 20, 9, 9]);
        let row = |t: &mut String, v: [&str; 5]| t.push_str(&layout.line(&v));
        row(
            &mut t,
            [
                "bench",
                "ns/packet",
                "95% CI (ns/batch)",
                "enq/pkt",
                "Mpkt/s",
            ],
        );
        for fp in ["on", "off"] {
            let r = crit(doc, fp);
            let ns = get(r, "ns_per_packet");
            row(
                &mut t,
                [
                    &format!("steer/dispatch/fast_path/{fp}"),
                    &fixed(ns, 2),
                    &format!(
                        "[{} {}]",
                        fixed(get(r, "ci_lower_ns"), 0),
                        fixed(get(r, "ci_upper_ns"), 0)
                    ),
                    &fixed(get(r, "ring_enqueues_per_packet"), 3),
                    &fixed(ns.filter(|&v| v != 0.0).map(|v| 1e3 / v), 1),
                ],
            );
        }
        let _ =
            writeln!(
            t,
            "criterion: fast path on: {}% fewer ring enqueues per packet, {}x faster per packet",
            crit_reduction(doc).unwrap_or_default(),
            div(get(crit(doc, "off"), "ns_per_packet"), get(crit(doc, "on"), "ns_per_packet"), 2)
        );
    }
    let _ = if goal_met(doc) {
        writeln!(
            t,
            "goal: met (>= {GOAL_PCT}% fewer ring enqueues per packet with the fast path on)"
        )
    } else {
        writeln!(
            t,
            "goal: NOT met (>= {GOAL_PCT}% fewer ring enqueues per packet with the fast path on)"
        )
    };
    let _ = writeln!(t);
    t
}

/// One end-to-end configuration's result, as `end_to_end[]` holds it.
fn e2e_json(
    layout: &str,
    fp: &str,
    cpus: &str,
    fin: &Value,
    gen: &FlowsResult,
    cpu_s: f64,
    echo_exit: i32,
) -> Value {
    let t = &fin["total"];
    let rx = num(t, "/rx").filter(|&r| r > 0.0);
    let enq = num(t, "/steered_out")
        .zip(num(t, "/queued_local"))
        .map(|(a, b)| a + b);
    let elapsed = Some(gen.elapsed_s).filter(|&e| e > 0.0);
    json!({
        "layout": layout,
        "fast_path": fp,
        "cpus": cpus,
        "rx": t["rx"],
        "tx": t["tx"],
        "fast_path_packets": t["fast_path"],
        "steered_out": t["steered_out"],
        "queued_local": t["queued_local"],
        "ring_enqueues": jopt(enq),
        "ring_enqueues_per_packet": jopt(enq.zip(rx).map(|(e, r)| e / r)),
        "fast_path_share": jopt(num(t, "/fast_path").zip(rx).map(|(f, r)| f / r)),
        "drops": t["drops"],
        "steering_updates": fin["steering_updates"],
        "traffic_s": jopt(elapsed),
        "generator_sent": gen.sent,
        "generator_received": gen.received,
        "replies_per_s": jopt(elapsed.map(|e| gen.received as f64 / e)),
        "echo_cpu_s": jnum(cpu_s),
        "echo_cpu_us_per_packet": jopt(rx.map(|r| cpu_s * 1e6 / r)),
        "echo_exit": echo_exit,
        "final_stats": fin,
    })
}

fn run_e2e(
    a: &FastPath,
    h: &Harness,
    bed: &TestBed,
    steer: &Path,
    port: u16,
    layout: &str,
    fp: &str,
) -> Result<Option<Value>> {
    let tag = format!("{layout}-{fp}");
    let (cpus, gen_pin) = if layout == "1cpu" {
        ("0", Some(1))
    } else {
        ("0,1", None)
    };
    h.log(&format!(
        "{tag}: steer echo --cpus {cpus} --fast-path {fp}, {} flows x {}, {}s",
        a.flows, a.window, a.secs
    ));
    let fin_path = h.path(&format!("{tag}-final.json"));
    let argv: Vec<String> = [
        &*steer.to_string_lossy(),
        "echo",
        "--interface",
        &bed.host_if,
        "--port",
        &port.to_string(),
        "--cpus",
        cpus,
        "--fast-path",
        fp,
        "--sockperf",
        "--no-table",
        "--stats-json",
        &fin_path.to_string_lossy(),
    ]
    .map(String::from)
    .to_vec();
    let log = h.path(&format!("{tag}-echo.log"));
    let mut echo = Proc::spawn("steer echo", &argv, &log, &Spawn::default())?;
    echo.wait_ready(Duration::from_secs(60))
        .with_context(|| format!("{tag}: steer echo did not start"))?;
    let c0 = echo.cpu_ticks();
    let g = super::spawn_generator(
        bed,
        FlowsConfig {
            dst: SocketAddr::from((bed.host_v4, port)),
            flows: a.flows.into(),
            window: a.window.into(),
            size: 64,
            duration: Duration::from_secs(a.secs),
            stall: Duration::from_millis(200),
        },
        gen_pin,
        h.stop_flag(),
    );
    let gen = super::join_generator(h, &tag, g);
    h.check()?;
    let c1 = echo.cpu_ticks();
    let rc = echo.stop(Duration::from_secs(15))?;
    if rc != 0 {
        h.log(&format!(
            "{tag}: steer echo exited with {rc}: {}",
            crate::procs::tail(&log, 2)
        ));
    }
    let fin = crate::servers::read_json(&fin_path);
    let (Some(fin), Some(gen)) = (fin, gen) else {
        h.log(&format!("{tag}: missing numbers (see --keep-logs)"));
        return Ok(None);
    };
    let cpu_s = match (c0, c1) {
        (Some(c0), Some(c1)) => c1.saturating_sub(c0) as f64 / harness::clk_tck(),
        _ => 0.0,
    };
    Ok(Some(e2e_json(layout, fp, cpus, &fin, &gen, cpu_s, rc)))
}

/// One run of the seed: criterion and the end-to-end layouts, the table and
/// the JSON.
pub fn run_once(a: &FastPath, h: &Harness) -> Result<Outcome> {
    let mut a = a.clone();
    if a.quick {
        a.secs = 3;
    }
    let (with_e2e, with_crit) = (!a.criterion_only, !a.e2e_only);
    if a.layouts.is_empty() {
        bail!("--layouts: give 1cpu, 2cpu or both");
    }
    harness::require_cpus_0_1("the generator and the echo are pinned to them")?;
    let steer = if with_e2e {
        harness::require_root("network namespaces, veth pairs, XDP programs, AF_XDP sockets; --criterion-only needs none")?;
        harness::require_tool("ip")?;
        Some(harness::steer_binary(a.run.steer.as_deref())?)
    } else {
        None
    };
    let src = harness::source_tree(a.run.common.src.as_deref())?;
    let mut failed = false;
    let mut criterion = Vec::new();
    if with_crit {
        let run = BenchRun::start(h, &src, "dispatch", FILTER, a.quick)?;
        failed |= !run.ok;
        let text = run.log_text();
        for fp in ["off", "on"] {
            let id = format!("{FILTER}/{fp}");
            let Some(e) = run.estimate(h, &id) else {
                failed = true;
                continue;
            };
            let more = json!({
                "packets": jnum(e.elements),
                "ns_per_packet": e.median_ns / e.elements,
                "ring_enqueues_per_packet": jopt(printed_enqueues(&text, &id)),
            });
            criterion.push(e.to_json("fast_path", fp.into(), more));
        }
    }
    let mut runs = Vec::new();
    if let Some(steer) = &steer {
        let bed = TestBed::create(2)?;
        let port = harness::free_udp_port(7000)?;
        h.log(&format!(
            "netns {}: {} flows from {} -> {} {}:{port}",
            bed.ns, a.flows, bed.peer_v4, bed.host_if, bed.host_v4
        ));
        for l in &a.layouts {
            for fp in ["on", "off"] {
                match run_e2e(&a, h, &bed, steer, port, l, fp)? {
                    Some(r) => runs.push(r),
                    None => failed = true,
                }
            }
        }
    }
    sort_runs(&mut runs, "layout", "fast_path");
    let mut doc = result_doc(
        TOOL,
        &src,
        json!({
            "config": {
                "seconds": a.secs,
                "flows": a.flows,
                "window": a.window,
                "quick": a.quick,
                "layouts": a.layouts,
                "e2e": with_e2e,
                "criterion": with_crit,
            },
            "end_to_end": runs,
            "criterion": criterion,
        }),
    );
    let met = goal_met(&doc);
    doc["goal_50pct_fewer_enqueues"] = json!(met);
    Ok(Outcome::new(doc, table, failed, a.require_goal && !met))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{committed_tables, result};

    #[test]
    fn tables_of_the_committed_results() {
        committed_tables("seed003-fast-path", "table-seed003", table, |_, doc| {
            assert!(goal_met(doc));
        });
    }

    #[test]
    fn goal_needs_every_part() {
        let mut doc = result("seed003-fast-path-1");
        doc["config"]["criterion"] = json!(false);
        assert!(!table(&doc).contains("criterion"));
        // Half the enqueues saved is enough, less is not.
        let on = doc["end_to_end"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["layout"] == "2cpu" && r["fast_path"] == "on")
            .unwrap();
        on["ring_enqueues_per_packet"] = json!(0.5);
        assert!(goal_met(&doc));
        doc["end_to_end"][3]["ring_enqueues_per_packet"] = json!(0.6);
        let t = table(&doc);
        assert!(t.contains("goal: NOT met"), "{t}");
        doc["end_to_end"] = json!([]);
        let t = table(&doc);
        assert!(
            t.contains(&format!("{:<6} {:<5} {:>10}", "1cpu", "on", "-")),
            "{t}"
        );
        assert!(t.contains("1cpu: fast path on: % fewer ring enqueues per packet; replies/s -x; CPU us/packet - -> -"), "{t}");
    }

    #[test]
    fn results_from_counters() {
        let fin = json!({"steering_updates": 16, "total": {"rx": 1000, "tx": 1000,
            "fast_path": 750, "steered_out": 50, "queued_local": 200, "drops": 0}});
        let gen = FlowsResult {
            elapsed_s: 2.0,
            sent: 1100,
            received: 1000,
            ..Default::default()
        };
        let r = e2e_json("2cpu", "on", "0,1", &fin, &gen, 0.008, 0);
        assert_eq!(r["ring_enqueues"], json!(250));
        assert_eq!(r["ring_enqueues_per_packet"], json!(0.25));
        assert_eq!(r["fast_path_share"], json!(0.75));
        assert_eq!(r["replies_per_s"], json!(500));
        assert_eq!(r["echo_cpu_us_per_packet"], json!(8));
        let none = json!({"total": {"rx": 0}});
        let r = e2e_json("1cpu", "off", "0", &none, &gen, 0.0, 0);
        assert!(r["ring_enqueues_per_packet"].is_null());
        assert!(r["echo_cpu_us_per_packet"].is_null());
    }
}
