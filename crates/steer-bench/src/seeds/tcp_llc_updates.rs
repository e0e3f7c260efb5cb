//! Seed 000 for kernel TCP sockets (`steer-bench seed tcp-llc-updates`): how many
//! steering updates (writes of a flow's CPU into the XDP RFS program's map,
//! one bpf(2) call each) a tokio TCP echo server makes under work-stealing,
//! policy `always` (every change of a connection's reading CPU is written)
//! against `llc` (only changes that cross a last-level cache, or are
//! forced), and what one update costs.
//!
//! What it runs. `steer tcp-echo --steer kernel-sockets` (one tokio
//! multi-thread runtime, a thread per CPU, unpinned: connections' tasks are
//! stolen between threads and threads move between CPUs; every read records
//! the reading thread's CPU) on the root-namespace end of a fresh 2-queue
//! veth pair; `steer tcp-load` drives it from the namespace with `--conns`
//! connections (closed loop, 64-byte messages, 2 threads). The client's
//! veth end keeps its default offloads: its partial checksums are completed
//! by the XDP program before each redirect. Four configurations, each with
//! a fresh server:
//!
//! ```text
//! real     x always | llc   the machine's topology (here: 2 CPUs, ONE LLC)
//! override x always | llc   --topology "pack:2 l3:1 core:1 pu:1": CPU 0 and
//!                           CPU 1 in different LLCs for the LLC rule
//! ```
//!
//! Columns. msg/s: echo round trips per second (client); writes:
//! desired-table writes the rule made (first records of each connection
//! included); coll: writes beyond one new_or_other_flow per connection,
//! i.e. connections that share a slot of the desired-CPU table overwriting
//! each other (neither policy suppresses those; the flow hash is keyed per
//! process, so which connections collide changes from run to run); supp:
//! records the LLC rule suppressed; updates: map writes (one per connection
//! to place it, then one per move; a table write naming the CPU already in
//! the map costs none); moves, mv/s: updates beyond the first placements,
//! and per second of the server's run; ns/update: mean, p50 and p99 of one
//! map write as the hook timed it (the bpf(2) BPF_MAP_UPDATE_ELEM call);
//! landed: frames each CPU's cpumap program saw.
//!
//! Goal: on the real topology `llc` makes at least 90% fewer moves than
//! `always`; on the override cross-LLC moves are still written (`llc`
//! moves > 0).
//!
//! The JSON has the fields of the shell script's results
//! (`seed`, `connections`,
//! `seconds`, `override`, `saving_percent`, `goal` as `met` / `not met`,
//! `runs[]` with the server's whole `--stats-json` report) and adds `tool`,
//! `format`, `host`, `machine_topology` and each run's `client` report.

use crate::table::Layout;
use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{
    find_run,
    harness::{self, Harness},
    Outcome, SteerRun,
};
use crate::netns::TestBed;
use crate::num::{fixed, jnum, jopt, num, raw, shortest};
use crate::procs::{self, Proc, Spawn};

/// The JSON `tool` of this seed.
pub const TOOL: &str = "steer-bench seed 000-tcp";
/// The shell script whose results carry no `tool`, only [`SEED`].
pub const OLD_TOOL: &str = "benches/seeds/seed000-kernel-sockets.sh";
/// The JSON `seed` field, the same in every result.
pub const SEED: &str = "000-kernel-sockets";
const GOAL_PCT: f64 = 90.0;
const TOPOLOGIES: [&str; 2] = ["real", "override"];
const POLICIES: [&str; 2] = ["always", "llc"];

/// `steer-bench seed tcp-llc-updates`.
#[derive(Debug, Clone, Args)]
pub struct TcpLlcUpdates {
    /// Seconds of load per configuration.
    #[arg(short = 't', long = "time", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub secs: u64,
    /// CI smoke: 2 s per configuration (too short for the goal).
    #[arg(long)]
    pub quick: bool,
    /// TCP connections, each its own flow.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub conns: u16,
    /// The 2-LLC topology.
    #[arg(long = "override", default_value = "pack:2 l3:1 core:1 pu:1")]
    pub override_spec: String,
    /// Exit 3 unless the goal is met.
    #[arg(long)]
    pub require_goal: bool,
    /// The `steer` command, output, runs, source tree.
    #[command(flatten)]
    pub run: SteerRun,
}

fn run_of<'a>(doc: &'a Value, topo: &str, policy: &str) -> Option<&'a Value> {
    find_run(&doc["runs"], |r| {
        r["topology"] == topo && r["policy"] == policy
    })
}

/// Map updates beyond the first placements of one configuration.
pub fn moves(doc: &Value, topo: &str, policy: &str) -> Option<f64> {
    run_of(doc, topo, policy).and_then(|r| num(r, "/moves"))
}

/// Percent fewer moves under llc than under always on the real topology
/// (0 when always made none).
pub fn saving(doc: &Value) -> Option<f64> {
    let (a, l) = (moves(doc, "real", "always")?, moves(doc, "real", "llc")?);
    Some(if a > 0.0 { (1.0 - l / a) * 100.0 } else { 0.0 })
}

/// Whether the goal is met: always moved connections on the real topology
/// and llc made at least 90% fewer moves there; llc still moved connections
/// across the override's two LLCs.
pub fn goal_met(doc: &Value) -> bool {
    let real = moves(doc, "real", "always").is_some_and(|a| a > 0.0)
        && saving(doc).is_some_and(|s| s >= GOAL_PCT);
    real && moves(doc, "override", "llc").is_some_and(|m| m > 0.0)
}

/// jq's `floor` of the number at `ptr`, printed as jq prints it.
fn floor(r: &Value, ptr: &str, scale: f64) -> String {
    num(r, ptr).map_or_else(|| "-".into(), |v| shortest((v * scale).floor() / scale))
}

fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        v => raw(v),
    }
}

/// The table the seed prints, from its JSON document.
pub fn table(doc: &Value) -> String {
    let layout = Layout::new(&[9, 7], &[9, 7, 6, 8, 8, 7, 7, 22]);
    let row = |t: &mut String, v: [&str; 11]| t.push_str(&layout.line(&v));
    let mut t = String::from("\n");
    row(
        &mut t,
        [
            "topology",
            "policy",
            "msg/s",
            "writes",
            "coll",
            "supp",
            "updates",
            "moves",
            "mv/s",
            "ns/update mean/p50/p99",
            "landed",
        ],
    );
    for topo in TOPOLOGIES {
        for policy in POLICIES {
            let Some(r) = run_of(doc, topo, policy) else {
                let d = "-";
                row(
                    &mut t,
                    [topo, policy, d, d, d, d, d, d, d, d, "-  (no numbers)"],
                );
                continue;
            };
            let ns = ["mean", "p50", "p99"]
                .map(|k| cell(r.pointer(&format!("/update_ns/{k}"))))
                .join("/");
            let landed = r
                .get("landed_per_cpu")
                .map_or_else(|| "null".into(), Value::to_string);
            row(
                &mut t,
                [
                    topo,
                    policy,
                    &floor(r, "/msg_per_s", 1.0),
                    &cell(r.get("writes")),
                    &cell(r.get("collisions")),
                    &cell(r.get("suppressed")),
                    &cell(r.get("map_updates")),
                    &cell(r.get("moves")),
                    &floor(r, "/moves_per_s", 10.0),
                    &ns,
                    &landed,
                ],
            );
        }
    }
    let mv = |topo, policy| moves(doc, topo, policy).map_or_else(|| "-".into(), shortest);
    let fewer = match saving(doc) {
        Some(s) if s < 0.0 => format!("{}% MORE", fixed(Some(-s), 1)),
        s => format!("{}% fewer", fixed(s, 1)),
    };
    let _ = writeln!(
        t,
        "\nreal topology: llc makes {fewer} moves than always ({} vs {})",
        mv("real", "llc"),
        mv("real", "always")
    );
    let followed = moves(doc, "override", "llc").is_some_and(|m| m > 0.0);
    let _ = writeln!(
        t,
        "override (2 LLCs): llc {} moves, always {} (cross-LLC moves {}followed)",
        mv("override", "llc"),
        mv("override", "always"),
        if followed { "" } else { "NOT " }
    );
    let _ = writeln!(
        t,
        "goal (>= {GOAL_PCT}% fewer on the real topology, cross-LLC moves followed on the override): {}",
        if goal_met(doc) { "met" } else { "not met" }
    );
    t
}

/// One configuration's entry of `runs[]`, from the server's `--stats-json`
/// report and the client's; `None` when a number the table needs is
/// missing.
pub fn result_json(topo: &str, policy: &str, server: &Value, client: &Value) -> Option<Value> {
    let conns = num(server, "/connections")?;
    let updates = num(server, "/map_updates")?;
    let elapsed = num(server, "/elapsed_s").filter(|&e| e > 0.0)?;
    num(client, "/messages_per_s")?;
    num(server, "/records/written")?;
    let moves = updates - conns;
    let other = num(server, "/records/written_by_reason/new_or_other_flow");
    Some(json!({
        "topology": topo,
        "policy": policy,
        "msg_per_s": client["messages_per_s"],
        "writes": server["records"]["written"],
        "collisions": jopt(other.map(|o| o - conns)),
        "moves": jnum(moves),
        "moves_per_s": jnum(moves / elapsed),
        "cross_llc": server["records"]["written_by_reason"]["cross_llc"],
        "suppressed": server["records"]["suppressed"],
        "map_updates": server["map_updates"],
        "update_ns": server["map_update_ns"],
        "landed_per_cpu": server["landed_per_cpu"],
        "program": server["program"],
        "server": server,
        "client": client,
    }))
}

/// The JSON report `steer tcp-load` prints, out of its log (which may hold
/// other lines around it).
pub fn client_report(log: &str) -> Option<Value> {
    let mut at = 0;
    for line in log.split_inclusive('\n') {
        if line.starts_with('{') {
            let mut values = serde_json::Deserializer::from_str(&log[at..]).into_iter::<Value>();
            if let Some(Ok(v)) = values.next() {
                if v.get("messages_per_s").is_some() {
                    return Some(v);
                }
            }
        }
        at += line.len();
    }
    None
}

fn run_config(
    a: &TcpLlcUpdates,
    h: &Harness,
    bed: &TestBed,
    steer: &Path,
    port: u16,
    topo: &str,
    policy: &str,
) -> Result<Option<Value>> {
    let tag = format!("{topo}-{policy}");
    let srv_json = h.path(&format!("{tag}-server.json"));
    let steer_s = steer.to_string_lossy().into_owned();
    let mut argv: Vec<String> = vec![
        steer_s.clone(),
        "tcp-echo".into(),
        "-i".into(),
        bed.host_if.clone(),
        "-p".into(),
        port.to_string(),
        "--policy".into(),
        policy.into(),
        "--no-table".into(),
        "--duration".into(),
        (a.secs + 2).to_string(),
        "--stats-json".into(),
        srv_json.to_string_lossy().into_owned(),
    ];
    if topo == "override" {
        argv.extend(["--topology".into(), a.override_spec.clone()]);
    }
    let log = h.path(&format!("{tag}-server.log"));
    let mut server = Proc::spawn("steer tcp-echo", &argv, &log, &Spawn::default())?;
    server
        .wait_ready(Duration::from_secs(60))
        .with_context(|| format!("{tag}: the server did not start"))?;
    h.log(&format!("{tag}: {} connections for {}s", a.conns, a.secs));
    let argv: Vec<String> = [
        "ip",
        "netns",
        "exec",
        &bed.ns,
        &steer_s,
        "tcp-load",
        "--connect",
        &format!("{}:{port}", bed.host_v4),
        "--connections",
        &a.conns.to_string(),
        "--threads",
        "2",
        "--duration",
        &a.secs.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let cli_log = h.path(&format!("{tag}-client.log"));
    let mut client = Proc::spawn("steer tcp-load", &argv, &cli_log, &Spawn::default())?;
    let (crc, _) = client.wait_exit(Duration::from_secs(a.secs + 30))?;
    h.check()?;
    if crc != 0 {
        h.log(&format!(
            "{tag}: the client exited with {crc}: {}",
            procs::tail(&cli_log, 3)
        ));
    }
    let (src, _) = server.wait_exit(Duration::from_secs(15))?;
    if src != 0 {
        h.log(&format!(
            "{tag}: the server exited with {src}: {}",
            procs::tail(&log, 3)
        ));
    }
    let Some(srv) = crate::servers::read_json(&srv_json) else {
        h.log(&format!("{tag}: no server report"));
        return Ok(None);
    };
    let Some(cli) = client_report(&std::fs::read_to_string(&cli_log).unwrap_or_default()) else {
        h.log(&format!("{tag}: no client report"));
        return Ok(None);
    };
    let r = result_json(topo, policy, &srv, &cli);
    if r.is_none() {
        h.log(&format!(
            "{tag}: missing numbers in the reports (see --keep-logs)"
        ));
    }
    Ok(r)
}

/// One run of the seed: every configuration, the table and the JSON.
pub fn run_once(a: &TcpLlcUpdates, h: &Harness) -> Result<Outcome> {
    let mut a = a.clone();
    if a.quick {
        a.secs = 2;
    }
    harness::require_root("network namespaces, veth pairs, XDP programs, BPF maps")?;
    harness::require_tool("ip")?;
    let (steer, src) = a.run.paths()?;
    let bed = TestBed::create(2)?;
    let port = harness::free_tcp_port(7500)?;
    let topology = harness::steer_topology(&steer);
    h.log(&format!(
        "netns {}: {} {}:{port} <- {} connections from {}; topology: {}",
        bed.ns,
        bed.host_if,
        bed.host_v4,
        a.conns,
        bed.peer_v4,
        if topology.is_empty() { "?" } else { &topology }
    ));
    let mut runs = Vec::new();
    let mut failed = false;
    for topo in TOPOLOGIES {
        for policy in POLICIES {
            match run_config(&a, h, &bed, &steer, port, topo, policy)? {
                Some(r) => runs.push(r),
                None => failed = true,
            }
        }
    }
    drop(bed);
    let mut doc = json!({
        "tool": TOOL,
        "format": 1,
        "seed": SEED,
        "host": harness::host_json(&src),
        "connections": a.conns,
        "seconds": a.secs,
        "override": a.override_spec,
        "machine_topology": topology,
        "runs": runs,
    });
    doc["saving_percent"] = jopt(saving(&doc));
    doc["goal"] = if goal_met(&doc) { "met" } else { "not met" }.into();
    let goal_missed = a.require_goal && !goal_met(&doc);
    Ok(Outcome::new(doc, table, failed, goal_missed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{committed_tables, result};

    #[test]
    fn tables_of_the_committed_results() {
        committed_tables(
            "seed000-kernel-sockets",
            "table-seed000-tcp",
            table,
            |n, doc| {
                // The stored saving and goal are what the rules say.
                assert_eq!(jopt(saving(doc)), doc["saving_percent"], "run {n}");
                assert_eq!(goal_met(doc), doc["goal"] == "met", "run {n}");
            },
        );
    }

    #[test]
    fn goals_and_missing_numbers() {
        let mut doc = result("seed000-kernel-sockets-1");
        let set = |doc: &mut Value, topo: &str, policy: &str, moves: u64| {
            let runs = doc["runs"].as_array_mut().unwrap();
            let r = runs
                .iter_mut()
                .find(|r| r["topology"] == topo && r["policy"] == policy)
                .unwrap();
            r["moves"] = json!(moves);
        };
        // 25 of 248 left: 89.9% fewer, short of 90%.
        set(&mut doc, "real", "llc", 25);
        assert_eq!(fixed(saving(&doc), 1), "89.9");
        assert!(!goal_met(&doc));
        let t = table(&doc);
        assert!(
            t.contains("llc makes 89.9% fewer moves than always (25 vs 248)"),
            "{t}"
        );
        assert!(t.ends_with(": not met\n"), "{t}");
        // More moves under llc: said so, not a negative saving.
        set(&mut doc, "real", "llc", 496);
        assert!(table(&doc).contains("llc makes 100.0% MORE moves"));
        // The override's llc must still move connections.
        set(&mut doc, "real", "llc", 0);
        assert!(goal_met(&doc));
        set(&mut doc, "override", "llc", 0);
        assert!(!goal_met(&doc));
        assert!(table(&doc).contains("always 1074 (cross-LLC moves NOT followed)"));
        // always never moved: no saving to claim.
        set(&mut doc, "override", "llc", 60);
        set(&mut doc, "real", "always", 0);
        assert_eq!(saving(&doc), Some(0.0));
        assert!(!goal_met(&doc));
        // A configuration without numbers: dashes, and the goal not met.
        doc["runs"].as_array_mut().unwrap().remove(0);
        let t = table(&doc);
        let line = t
            .lines()
            .find(|l| l.starts_with("real      always"))
            .unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        // Eight dashed columns, then the landed column's note.
        assert_eq!(
            cells[2..].join(" "),
            "- - - - - - - - - (no numbers)",
            "{t}"
        );
        assert!(
            t.contains("llc makes -% fewer moves than always (0 vs -)"),
            "{t}"
        );
        assert!(saving(&doc).is_none() && !goal_met(&doc));
    }

    #[test]
    fn results_from_the_reports() {
        let doc = result("seed000-kernel-sockets-2");
        let old = run_of(&doc, "override", "llc").unwrap();
        let client = json!({"connections": 64, "messages_per_s": old["msg_per_s"]});
        let r = result_json("override", "llc", &old["server"], &client).unwrap();
        // Every field the script wrote, with the same values.
        for (k, v) in old.as_object().unwrap() {
            assert_eq!(&r[k], v, "{k}");
        }
        assert_eq!(r["client"], client);
        assert_eq!(r["moves"], json!(826));
        // A number missing from either report: no result, not a guess.
        let mut srv = old["server"].clone();
        srv.as_object_mut().unwrap().remove("map_updates");
        assert!(result_json("override", "llc", &srv, &client).is_none());
        assert!(result_json("override", "llc", &old["server"], &json!({})).is_none());
        let mut srv = old["server"].clone();
        srv["elapsed_s"] = json!(0);
        assert!(result_json("override", "llc", &srv, &client).is_none());
    }

    #[test]
    fn the_client_report_out_of_its_log() {
        let log =
            "libbpf: something {odd}\n{\n  \"connections\": 2,\n  \"messages_per_s\": 1.5\n}\n";
        assert_eq!(client_report(log).unwrap()["messages_per_s"], json!(1.5));
        assert!(client_report("{\"other\": 1}\n").is_none());
        assert!(client_report("Error: connecting to 198.18.1.1:7500\n").is_none());
        assert!(
            client_report("{\n  \"messages_per_s\": 1\n").is_none(),
            "cut short"
        );
    }
}
