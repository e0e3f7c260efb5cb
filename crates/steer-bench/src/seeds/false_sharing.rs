//! `steer-bench seed false-sharing`: seeds 002 ("bridge: improve cache utilization": write-heavy fdb members
//! moved to their own cache line, HitM 100% -> 0%) and 004 ("net: dst:
//! Prevent false sharing vs. dst_entry::__refcnt": +20..120%): throughput
//! of flow-table lookups and of the counters written next to them, with the
//! counters split onto their own padded cache line (steer's
//! DesiredCpuTable layout) against packed into the header's line, under
//! two threads. No network, no root; CPUs 0 and 1 to pin to.
//!
//! 1. criterion, steer's own bench (benches/table.rs), filtered to
//!    `steer/flow_table/false_sharing/{split,packed}` (lookups while a
//!    second thread, pinned to the other CPU, bumps the record counters),
//!    `.../desired_table_llc_churn` (the real DesiredCpuTable while the
//!    other thread records suppressed intra-LLC churn) and
//!    `steer/flow_table/lookup/hit` (no second thread): median ns per batch
//!    of 1024 lookups, turned into lookups per second.
//! 2. The replica ([`sharing_replica`]): both threads
//!    measured over a fixed time, the reader's lookups/s and the writer's
//!    counter increments/s, each also alone.
//!
//! Goal (no number): split beats packed under two threads, for the reader
//! and for the writer.

use crate::table::Layout;
use std::fmt::Write as _;

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};

use super::{
    config_flag,
    criterion::BenchRun,
    harness::{self, Harness},
    result_doc, sharing_replica, Common, Outcome,
};
use crate::num::{div, fixed, jnum, num, raw};

/// The JSON `tool` of this seed.
pub const TOOL: &str = "steer-bench seed 002-004";
/// What results of the shell script call it.
pub const OLD_TOOL: &str = "benches/seeds/seed002-004-false-sharing.sh";
/// The criterion benches read, in table order.
pub const CRITERION_IDS: [&str; 4] = [
    "steer/flow_table/false_sharing/split",
    "steer/flow_table/false_sharing/packed",
    "steer/flow_table/false_sharing/desired_table_llc_churn",
    "steer/flow_table/lookup/hit",
];
const FILTER: &str = "steer/flow_table/(false_sharing|lookup/hit)";

/// `steer-bench seed false-sharing`.
#[derive(Debug, Clone, Args)]
pub struct FalseSharing {
    /// CI smoke: criterion warm-up 1 s / measurement 2 s, replica 1 s per case.
    #[arg(long)]
    pub quick: bool,
    /// Replica seconds per case (default 3, 1 with --quick); criterion uses
    /// its defaults (3 s warm-up, 5 s measurement) unless --quick.
    #[arg(short = 't', long = "time")]
    pub secs: Option<f64>,
    /// Skip the replica.
    #[arg(long, conflicts_with = "replica_only")]
    pub criterion_only: bool,
    /// Skip criterion.
    #[arg(long)]
    pub replica_only: bool,
    /// Output, runs, source tree.
    #[command(flatten)]
    pub common: Common,
}

fn crit<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    super::find_run(&doc["criterion"], |c| {
        c["id"].as_str().and_then(|id| id.rsplit('/').next()) == Some(name)
    })
}

fn rep(doc: &Value, case: &str, layout: &str, key: &str) -> Option<f64> {
    super::find_run(&doc["replica"], |r| {
        r["case"] == case && r["layout"] == layout
    })
    .and_then(|r| num(r, &format!("/{key}")))
}

fn mega(v: Option<f64>) -> String {
    fixed(v.map(|v| v / 1e6), 1)
}

/// Split beats packed: in criterion (lower median) and in the replica
/// (more lookups and more increments), for the parts that ran.
pub fn goal_met(doc: &Value) -> bool {
    let mut ok = true;
    if config_flag(doc, "criterion") {
        let med = |n| crit(doc, n).and_then(|c| num(c, "/median_ns"));
        ok &= matches!((med("split"), med("packed")), (Some(s), Some(p)) if s < p);
    }
    if config_flag(doc, "replica") {
        let both = |l, k| rep(doc, "both", l, k);
        ok &= matches!(
            (both("split", "lookups_per_s"), both("packed", "lookups_per_s"),
             both("split", "increments_per_s"), both("packed", "increments_per_s")),
            (Some(sl), Some(pl), Some(si), Some(pi)) if sl > pl && si > pi
        );
    }
    ok
}

/// The table the seed prints, from its JSON document.
pub fn table(doc: &Value) -> String {
    let mut t = String::new();
    let _ = writeln!(t);
    let (with_crit, with_rep) = (config_flag(doc, "criterion"), config_flag(doc, "replica"));
    if with_crit {
        let _ = writeln!(t, "seeds 002/004 (criterion, benches/table.rs): lookups of 1024 flows per batch, second thread pinned to the other CPU");
        let layout = Layout::new(&[55], &[10, 14, 9, 9]);
        let row = |t: &mut String, v: [&str; 5]| t.push_str(&layout.line(&v));
        row(
            &mut t,
            ["bench", "median ns", "95% CI", "M look/s", "x packed"],
        );
        let packed = crit(doc, "packed").and_then(|c| num(c, "/median_ns"));
        for name in ["split", "packed", "desired_table_llc_churn", "hit"] {
            let c = crit(doc, name);
            let get = |k: &str| c.and_then(|c| num(c, &format!("/{k}")));
            let id = c.map_or(name.to_owned(), |c| raw(c.get("id")));
            row(
                &mut t,
                [
                    &id,
                    &fixed(get("median_ns"), 0),
                    &format!(
                        "[{} {}]",
                        fixed(get("ci_lower_ns"), 0),
                        fixed(get("ci_upper_ns"), 0)
                    ),
                    &mega(get("lookups_per_s")),
                    &div(packed, get("median_ns"), 2),
                ],
            );
        }
        let _ = writeln!(
            t,
            "(lookup/hit: no second thread, the uncontended reference)"
        );
    }
    if with_rep {
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "seeds 002/004 (sharing_replica.rs replica, {}s per case): reader lookups and writer counter increments per second",
            raw(doc.pointer("/config/replica_seconds_per_case"))
        );
        let layout = Layout::new(&[8], &[14, 14, 16, 16]);
        let row = |t: &mut String, v: [&str; 5]| t.push_str(&layout.line(&v));
        row(
            &mut t,
            [
                "layout",
                "M look/s both",
                "M incr/s both",
                "M look/s alone",
                "M incr/s alone",
            ],
        );
        for l in ["split", "packed"] {
            row(
                &mut t,
                [
                    l,
                    &mega(rep(doc, "both", l, "lookups_per_s")),
                    &mega(rep(doc, "both", l, "increments_per_s")),
                    &mega(rep(doc, "reader_alone", l, "lookups_per_s")),
                    &mega(rep(doc, "writer_alone", l, "increments_per_s")),
                ],
            );
        }
        let both = |l, k| rep(doc, "both", l, k);
        let _ = writeln!(
            t,
            "split/packed under two threads: lookups {}x, increments {}x",
            div(
                both("split", "lookups_per_s"),
                both("packed", "lookups_per_s"),
                2
            ),
            div(
                both("split", "increments_per_s"),
                both("packed", "increments_per_s"),
                2
            )
        );
    }
    let _ = if goal_met(doc) {
        writeln!(
            t,
            "goal: met (split beats packed under two threads{})",
            if with_rep { ", reader and writer" } else { "" }
        )
    } else {
        writeln!(
            t,
            "goal: NOT met (split must beat packed under two threads)"
        )
    };
    let _ = writeln!(t);
    t
}

/// The `false_sharing/...: N batches timed, M retried` lines of a
/// criterion log.
pub fn batch_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.starts_with("false_sharing/") && l.contains("batches timed"))
        .map(str::to_owned)
        .collect()
}

/// One run of the seed: criterion and the replica, the table and the JSON.
pub fn run_once(a: &FalseSharing, h: &Harness) -> Result<Outcome> {
    let secs = a.secs.unwrap_or(if a.quick { 1.0 } else { 3.0 });
    if !(secs > 0.0 && secs <= 600.0) {
        anyhow::bail!("-t wants seconds (0 < t <= 600)");
    }
    harness::require_cpus_0_1("the two threads are pinned to them")?;
    let src = harness::source_tree(a.common.src.as_deref())?;
    let (with_crit, with_rep) = (!a.replica_only, !a.criterion_only);
    let mut failed = false;
    let mut criterion = Vec::new();
    let mut batches = Vec::new();
    if with_crit {
        let run = BenchRun::start(h, &src, "table", FILTER, a.quick)?;
        failed |= !run.ok;
        for id in CRITERION_IDS {
            let Some(e) = run.estimate(h, id) else {
                failed = true;
                continue;
            };
            let more = json!({
                "elements": jnum(e.elements),
                "lookups_per_s": e.elements * 1e9 / e.median_ns,
            });
            criterion.push(e.to_json("id", id.into(), more));
        }
        criterion.sort_by_key(|c| raw(c.get("id")).rsplit('/').next().map(str::to_owned));
        batches = batch_lines(&run.log_text());
    }
    let mut replica = Vec::new();
    if with_rep {
        h.log(&format!(
            "replica: {secs}s per case, reader on CPU 0, writer on CPU 1"
        ));
        if cfg!(debug_assertions) {
            h.log("steer-bench is a debug build: the replica's rates mean nothing (cargo build --release -p steer-bench)");
        }
        match sharing_replica::run_all(secs, 0, 1) {
            Ok(cases) => replica = cases,
            Err(e) => {
                h.log(&format!("the replica failed: {e:#}"));
                failed = true;
            }
        }
    }
    let mut doc = result_doc(
        TOOL,
        &src,
        json!({
            "config": {
                "quick": a.quick,
                "replica_seconds_per_case": jnum(secs),
                "reader_cpu": 0,
                "writer_cpu": 1,
                "criterion": with_crit,
                "replica": with_rep,
            },
            "criterion": criterion,
            "criterion_batches": batches,
            "replica": replica,
        }),
    );
    doc["goal_split_beats_packed"] = json!(goal_met(&doc));
    Ok(Outcome::new(doc, table, failed, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{committed_tables, result};

    #[test]
    fn tables_of_the_committed_results() {
        committed_tables(
            "seed002-004-false-sharing",
            "table-seed002-004",
            table,
            |_, doc| {
                assert!(goal_met(doc));
            },
        );
    }

    #[test]
    fn parts_and_goal() {
        let mut doc = result("seed002-004-false-sharing-1");
        doc["config"]["replica"] = json!(false);
        let t = table(&doc);
        assert!(!t.contains("replica"), "{t}");
        assert!(
            t.contains("goal: met (split beats packed under two threads)\n"),
            "{t}"
        );
        // packed faster than split in the replica: not met.
        doc["config"]["replica"] = json!(true);
        doc["replica"][0]["lookups_per_s"] = json!(1);
        assert!(!goal_met(&doc));
        // Missing criterion results: short names and dashes, goal not met.
        doc["criterion"] = json!([]);
        let t = table(&doc);
        let dashes = format!(
            "\n{:<55} {:>10} {:>14} {:>9} {:>9}\n",
            "split", "-", "[- -]", "-", "-"
        );
        assert!(t.contains(&dashes), "{t}");
        assert!(t.contains("goal: NOT met"), "{t}");
    }

    #[test]
    fn batch_lines_of_a_log() {
        let log =
            "Benchmarking x\nfalse_sharing/split: 2684775 batches timed, 21033 retried\nother\n";
        assert_eq!(
            batch_lines(log),
            ["false_sharing/split: 2684775 batches timed, 21033 retried"]
        );
    }
}
