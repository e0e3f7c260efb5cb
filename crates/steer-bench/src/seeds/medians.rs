//! Medians over several `--json` outputs of one seed, as the Markdown
//! tables of benches/seeds/README.md: each cell is the median over the runs
//! of that number (the mean of the two middle values for an even count);
//! ratios and reductions are computed per run first, then their median is
//! taken.
//!
//! Invariant: every document must come from the same seed; a seed's
//! `tool` has two spellings (`"steer-bench seed 000"` and the shell
//! script's `"benches/seeds/seed000-llc-steering.sh"`, or no `tool` but
//! `"seed": "000-kernel-sockets"`), which mix freely: they share one
//! format.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{false_sharing, fast_path, llc_updates, sockmap_affinity, tcp_llc_updates};
use crate::{
    num::{median, num, ratio, raw, round_to},
    table::{md_head, md_row},
};

/// Which seed a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// `steer-bench seed llc-updates`.
    LlcUpdates,
    /// `steer-bench seed tcp-llc-updates`.
    TcpLlcUpdates,
    /// `steer-bench seed sockmap-affinity`.
    SockmapAffinity,
    /// `steer-bench seed false-sharing`.
    FalseSharing,
    /// `steer-bench seed fast-path`.
    FastPath,
}

impl Seed {
    /// The seed of a JSON document's `tool`, old or new.
    pub fn of_tool(tool: &str) -> Option<Seed> {
        [
            (Seed::LlcUpdates, llc_updates::TOOL, llc_updates::OLD_TOOL),
            (
                Seed::TcpLlcUpdates,
                tcp_llc_updates::TOOL,
                tcp_llc_updates::OLD_TOOL,
            ),
            (
                Seed::SockmapAffinity,
                sockmap_affinity::TOOL,
                sockmap_affinity::OLD_TOOL,
            ),
            (
                Seed::FalseSharing,
                false_sharing::TOOL,
                false_sharing::OLD_TOOL,
            ),
            (Seed::FastPath, fast_path::TOOL, fast_path::OLD_TOOL),
        ]
        .into_iter()
        .find(|(_, new, old)| tool == *new || tool == *old)
        .map(|(s, _, _)| s)
    }

    /// The tool a JSON document names: its `tool`, or for the kernel-socket
    /// script's results (which have none) that script.
    pub fn tool_of(doc: &Value) -> String {
        match doc.get("tool") {
            None if doc["seed"] == tcp_llc_updates::SEED => tcp_llc_updates::OLD_TOOL.into(),
            t => raw(t),
        }
    }
}

/// Median of the number at `ptr` over `runs`, rounded to `d` decimals.
fn med(runs: &[&Value], ptr: &str, d: i32) -> String {
    round_to(median(runs.iter().map(|r| num(r, ptr))), d)
}

/// Median of `f` over `runs`, rounded to `d` decimals.
fn med_by(runs: &[&Value], d: i32, f: impl Fn(&Value) -> Option<f64>) -> String {
    round_to(median(runs.iter().map(|r| f(r))), d)
}

/// A medians table: one row per group, its `keys` (as the group's first
/// run has them), then per column `(name, pointer, decimals)` the median of
/// that number over the group.
fn med_table(keys: &[&str], cols: &[(&str, &str, i32)], groups: &[Vec<&Value>]) -> String {
    let mut names = keys.to_vec();
    names.extend(cols.iter().map(|c| c.0));
    let mut o = md_head(&names);
    for g in groups {
        let mut row: Vec<String> = keys.iter().map(|k| s(g[0], k)).collect();
        row.extend(cols.iter().map(|&(_, ptr, d)| med(g, ptr, d)));
        o += &md_row(&row);
    }
    o
}

/// The `runs` of every document grouped by topology and policy, the real
/// topology first, then by policy.
fn topology_policy_groups(docs: &[Value]) -> Vec<Vec<&Value>> {
    let mut g = groups(docs, "runs", |r| vec![s(r, "topology"), s(r, "policy")]);
    g.sort_by_key(|g| (g[0]["topology"] != "real", s(g[0], "policy")));
    g
}

/// The runs of every document under `key` (an array), grouped by `by` and
/// ordered by it (jq's `group_by`).
fn groups<'a>(
    docs: &'a [Value],
    key: &str,
    by: impl Fn(&Value) -> Vec<String>,
) -> Vec<Vec<&'a Value>> {
    let mut g: BTreeMap<Vec<String>, Vec<&Value>> = BTreeMap::new();
    for r in docs.iter().filter_map(|d| d[key].as_array()).flatten() {
        g.entry(by(r)).or_default().push(r);
    }
    g.into_values().collect()
}

fn s(v: &Value, key: &str) -> String {
    raw(v.get(key))
}

/// The last run in `runs` with `key` == `value` (jq's `INDEX`).
fn indexed<'a>(runs: impl Iterator<Item = &'a Value>, key: &str, value: &str) -> Option<&'a Value> {
    runs.filter(|r| r[key] == value).last()
}

/// Per run: among the rows under `arr` that `keep` accepts, the number at
/// `ptr` of the row whose `key` is `top` over that of the row whose `key`
/// is `bottom` (`by` = (key, top, bottom); the last such rows, jq's
/// `INDEX`); then the median of those ratios over the runs.
fn median_ratio(
    docs: &[Value],
    arr: &str,
    keep: impl Fn(&Value) -> bool,
    by: (&str, &str, &str),
    ptr: &str,
) -> Option<f64> {
    let (key, top, bottom) = by;
    median(docs.iter().map(|d| {
        let rows = || d[arr].as_array().into_iter().flatten().filter(|r| keep(r));
        let a = indexed(rows(), key, top)?;
        let b = indexed(rows(), key, bottom)?;
        ratio(num(a, ptr), num(b, ptr))
    }))
}

/// The distinct values of `key` over the rows under `arr` of every
/// document, sorted.
fn distinct(docs: &[Value], arr: &str, key: &str) -> Vec<String> {
    let mut v: Vec<String> = docs
        .iter()
        .filter_map(|d| d[arr].as_array())
        .flatten()
        .map(|r| s(r, key))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn count(docs: &[Value], ptr: &str) -> usize {
    docs.iter()
        .filter(|d| d.pointer(ptr).and_then(Value::as_bool) == Some(true))
        .count()
}

/// The load averages the runs recorded; nothing when none did (the
/// kernel-socket script's results).
fn load_line(docs: &[Value]) -> String {
    if docs.iter().all(|d| d.get("host").is_none()) {
        return String::new();
    }
    let loads: Vec<String> = docs
        .iter()
        .map(|d| raw(d.pointer("/host/loadavg_1_5_15")))
        .collect();
    format!(
        "load average (1/5/15 min) at the end of each run: {}\n",
        loads.join("; ")
    )
}

/// The Markdown medians of `docs` (all of one seed).
pub fn markdown(docs: &[Value]) -> Result<String> {
    let Some(first) = docs.first() else {
        bail!("medians: no results given");
    };
    let tool = Seed::tool_of(first);
    let Some(seed) = Seed::of_tool(&tool) else {
        bail!("medians: unknown tool {tool:?}");
    };
    for d in docs {
        let t = Seed::tool_of(d);
        if Seed::of_tool(&t) != Some(seed) {
            bail!("medians: a result comes from {t:?}, not from {tool:?}");
        }
    }
    let mut out = format!("medians of {} runs of {tool}\n\n", docs.len());
    out += &match seed {
        Seed::LlcUpdates => llc_updates_md(docs),
        Seed::TcpLlcUpdates => tcp_llc_updates_md(docs),
        Seed::SockmapAffinity => sockmap_affinity_md(docs),
        Seed::FalseSharing => false_sharing_md(docs),
        Seed::FastPath => fast_path_md(docs),
    };
    Ok(out)
}

fn llc_updates_md(docs: &[Value]) -> String {
    let g = topology_policy_groups(docs);
    let mut o = med_table(
        &["topology", "policy"],
        &[
            ("dgram/s", "/window/rx_per_s", 0),
            ("hook calls/s", "/window/hook_calls_per_s", 1),
            ("hook calls (run)", "/run/steering_updates", 0),
            ("desired upd/s", "/run/desired_updates_per_s", 1),
            ("suppressed/s", "/run/suppressed_per_s", 0),
            ("cross_llc", "/run/by_reason/cross_llc", 0),
            ("other-flow", "/run/by_reason/new_or_other_flow", 0),
            ("collision writes", "/run/collision_writes", 0),
            ("CPU s/s", "/window/cpu_s_per_s", 2),
            ("CPU ms/1k dgram", "/window/cpu_ms_per_1k", 2),
        ],
        &g,
    );
    let per_run = |topo: &str| {
        let ptr = format!("/reduction_pct/{topo}");
        let each: Vec<String> = docs.iter().map(|d| round_to(num(d, &ptr), 1)).collect();
        format!(
            "{topo} {} (median {})",
            each.join(", "),
            round_to(median(docs.iter().map(|d| num(d, &ptr))), 1)
        )
    };
    o += "\n";
    o += &format!(
        "llc vs always, % fewer hook calls/s (per run): {}; {}\n",
        per_run("real"),
        per_run("override")
    );
    o += &format!(
        "goal met in: real {}/{n} runs, override (cross-LLC followed) {}/{n} runs\n",
        count(docs, "/goal/real_95pct_fewer"),
        count(docs, "/goal/override_cross_llc_followed"),
        n = docs.len()
    );
    o + &load_line(docs)
}

fn tcp_llc_updates_md(docs: &[Value]) -> String {
    let g = topology_policy_groups(docs);
    let mut o = med_table(
        &["topology", "policy"],
        &[
            ("msg/s", "/msg_per_s", 0),
            ("writes", "/writes", 0),
            ("collisions", "/collisions", 0),
            ("suppressed", "/suppressed", 0),
            ("map updates", "/map_updates", 0),
            ("moves", "/moves", 0),
            ("moves/s", "/moves_per_s", 1),
            ("cross_llc", "/cross_llc", 0),
            ("ns/update mean", "/update_ns/mean", 0),
            ("ns/update p50", "/update_ns/p50", 0),
            ("ns/update p99", "/update_ns/p99", 0),
        ],
        &g,
    );
    o += "\n";
    let per_run: Vec<String> = g
        .iter()
        .map(|g| {
            let (topo, policy) = (s(g[0], "topology"), s(g[0], "policy"));
            let each: Vec<String> = docs
                .iter()
                .map(|d| round_to(tcp_llc_updates::moves(d, &topo, &policy), 0))
                .collect();
            format!("{topo} {policy} {}", each.join(" / "))
        })
        .collect();
    o += &format!(
        "moves (map updates after the first placements) per run: {}\n",
        per_run.join("; ")
    );
    let each: Vec<String> = docs
        .iter()
        .map(|d| round_to(num(d, "/saving_percent"), 1))
        .collect();
    o += &format!(
        "real topology, llc vs always, % fewer moves (per run): {} (median {})\n",
        each.join(", "),
        round_to(median(docs.iter().map(|d| num(d, "/saving_percent"))), 1)
    );
    o += &format!(
        "goal (>= 90% fewer on the real topology, cross-LLC moves followed on the override) met in {}/{} runs\n",
        docs.iter().filter(|d| d["goal"] == "met").count(),
        docs.len()
    );
    o + &load_line(docs)
}

fn sockmap_affinity_md(docs: &[Value]) -> String {
    let mut o = md_head(&[
        "layout",
        "placement",
        "rx CPU",
        "sent/s",
        "rx/s",
        "fwd/s",
        "reply/s",
        "recv/s",
        "fwd %",
        "recv %",
        "xsk drops",
        "app drops",
        "proxy CPU s/s",
    ]);
    let mut g = groups(docs, "runs", |r| vec![s(r, "layout"), s(r, "placement")]);
    let place_order = |p: &Value| match p.as_str() {
        Some("same") => 0,
        Some("unpinned") => 1,
        Some("other") => 2,
        _ => 3,
    };
    g.sort_by_key(|g| {
        (
            g[0]["layout"] != "per-core",
            place_order(&g[0]["placement"]),
        )
    });
    for g in &g {
        let mut cpus: Vec<String> = g
            .iter()
            .map(|r| match &r["rx_cpu"] {
                Value::Null => "null".into(),
                v => raw(Some(v)),
            })
            .collect();
        cpus.sort();
        cpus.dedup();
        o += &md_row(&[
            s(g[0], "layout"),
            s(g[0], "placement"),
            cpus.join("/"),
            med(g, "/sent_per_s", 0),
            med(g, "/rx_per_s", 0),
            med(g, "/forwarded_per_s", 0),
            med(g, "/replied_per_s", 0),
            med(g, "/received_per_s", 0),
            med(g, "/forwarded_pct", 1),
            med(g, "/received_pct", 1),
            med(g, "/xsk_drops", 0),
            med(g, "/steer_drops", 0),
            med(g, "/proxy_cpu_s_per_s", 2),
        ]);
    }
    o += "\n";
    let layouts = distinct(docs, "runs", "layout");
    for l in &layouts {
        let against_same = |p: &str| {
            let in_layout = |r: &Value| r["layout"] == l.as_str();
            let by = ("placement", p, "same");
            round_to(
                median_ratio(docs, "runs", in_layout, by, "/forwarded_per_s"),
                2,
            )
        };
        o += &format!(
            "{l}: forwarded/s against same (per run, then median): unpinned {}x, other {}x\n",
            against_same("unpinned"),
            against_same("other")
        );
    }
    o + &load_line(docs)
}

fn false_sharing_md(docs: &[Value]) -> String {
    const PACKED: &str = "steer/flow_table/false_sharing/packed";
    let mut o = md_head(&[
        "criterion bench",
        "median ns / 1024 lookups",
        "M lookups/s",
        "x packed",
    ]);
    let mut g = groups(docs, "criterion", |c| vec![s(c, "id")]);
    let order = |id: &Value| match id.as_str() {
        Some("steer/flow_table/false_sharing/split") => 0,
        Some(PACKED) => 1,
        Some("steer/flow_table/false_sharing/desired_table_llc_churn") => 2,
        _ => 3,
    };
    g.sort_by_key(|g| order(&g[0]["id"]));
    for g in &g {
        let id = s(g[0], "id");
        let by = ("id", PACKED, id.as_str());
        let x_packed = median_ratio(docs, "criterion", |_| true, by, "/median_ns");
        o += &md_row(&[
            id.clone(),
            med(g, "/median_ns", 0),
            med_by(g, 1, |c| num(c, "/lookups_per_s").map(|v| v / 1e6)),
            round_to(x_packed, 2),
        ]);
    }
    o += "\n";
    o += &md_head(&[
        "replica layout",
        "M lookups/s (both)",
        "M increments/s (both)",
        "M lookups/s (reader alone)",
        "M increments/s (writer alone)",
    ]);
    let replica = |case: &str, layout: &str, key: &str| {
        let v = docs
            .iter()
            .filter_map(|d| d["replica"].as_array())
            .flatten()
            .filter(|r| r["case"] == case && r["layout"] == layout)
            .map(|r| num(r, &format!("/{key}")).map(|v| v / 1e6));
        round_to(median(v), 1)
    };
    for l in ["split", "packed"] {
        o += &md_row(&[
            l.into(),
            replica("both", l, "lookups_per_s"),
            replica("both", l, "increments_per_s"),
            replica("reader_alone", l, "lookups_per_s"),
            replica("writer_alone", l, "increments_per_s"),
        ]);
    }
    let split_over_packed = |key: &str| {
        let both = |r: &Value| r["case"] == "both";
        let by = ("layout", "split", "packed");
        round_to(
            median_ratio(docs, "replica", both, by, &format!("/{key}")),
            2,
        )
    };
    o += "\n";
    o += &format!(
        "replica split/packed under two threads (per run, then median): lookups {}x, increments {}x\n",
        split_over_packed("lookups_per_s"),
        split_over_packed("increments_per_s")
    );
    o += &format!(
        "goal (split beats packed) met in {}/{} runs\n",
        count(docs, "/goal_split_beats_packed"),
        docs.len()
    );
    o + &load_line(docs)
}

fn fast_path_md(docs: &[Value]) -> String {
    let mut o = md_head(&[
        "layout",
        "fast path",
        "ring enqueues/packet",
        "fast-path share %",
        "replies/s",
        "echo CPU us/packet",
        "drops",
    ]);
    let mut g = groups(docs, "end_to_end", |r| {
        vec![s(r, "layout"), s(r, "fast_path")]
    });
    g.sort_by_key(|g| (s(g[0], "layout"), g[0]["fast_path"] != "on"));
    for g in &g {
        o += &md_row(&[
            s(g[0], "layout"),
            s(g[0], "fast_path"),
            med(g, "/ring_enqueues_per_packet", 3),
            med_by(g, 1, |r| num(r, "/fast_path_share").map(|v| v * 100.0)),
            med(g, "/replies_per_s", 0),
            med(g, "/echo_cpu_us_per_packet", 2),
            med(g, "/drops", 0),
        ]);
    }
    o += "\n";
    o += &md_head(&[
        "criterion bench",
        "ns/packet",
        "ring enqueues/packet",
        "Mpackets/s",
    ]);
    let mut g = groups(docs, "criterion", |c| vec![s(c, "fast_path")]);
    g.sort_by_key(|g| g[0]["fast_path"] != "on");
    for g in &g {
        o += &md_row(&[
            format!("steer/dispatch/fast_path/{}", s(g[0], "fast_path")),
            med(g, "/ns_per_packet", 2),
            med(g, "/ring_enqueues_per_packet", 3),
            med_by(g, 1, |c| num(c, "/ns_per_packet").map(|v| 1e3 / v)),
        ]);
    }
    o += "\n";
    let layouts = distinct(docs, "end_to_end", "layout");
    for l in &layouts {
        let on_over_off = |key: &str| {
            let in_layout = |r: &Value| r["layout"] == l.as_str();
            let by = ("fast_path", "on", "off");
            let ptr = format!("/{key}");
            round_to(median_ratio(docs, "end_to_end", in_layout, by, &ptr), 2)
        };
        o += &format!(
            "{l}: replies/s on/off (per run, then median): {}x; CPU us/packet on/off: {}x\n",
            on_over_off("replies_per_s"),
            on_over_off("echo_cpu_us_per_packet")
        );
    }
    let by = ("fast_path", "off", "on");
    let off_over_on = round_to(
        median_ratio(docs, "criterion", |_| true, by, "/ns_per_packet"),
        2,
    );
    o += &format!("criterion off/on ns per packet (per run, then median): {off_over_on}x\n");
    o += &format!(
        "goal (>= 50% fewer ring enqueues per packet) met in {}/{} runs\n",
        count(docs, "/goal_50pct_fewer_enqueues"),
        docs.len()
    );
    o + &load_line(docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{fixture, result};

    fn three(name: &str) -> Vec<Value> {
        (1..=3).map(|n| result(&format!("{name}-{n}"))).collect()
    }

    #[test]
    fn the_readme_tables_from_the_committed_results() {
        for (name, fx) in [
            ("seed000-llc-steering", "medians-seed000.md"),
            ("seed000-kernel-sockets", "medians-seed000-tcp.md"),
            ("seed001-pinned-proxy", "medians-seed001.md"),
            ("seed002-004-false-sharing", "medians-seed002-004.md"),
            ("seed003-fast-path", "medians-seed003.md"),
        ] {
            assert_eq!(markdown(&three(name)).unwrap(), fixture(fx), "{name}");
        }
    }

    #[test]
    fn old_and_new_results_mix_but_seeds_do_not() {
        let mut docs = three("seed003-fast-path");
        docs[1]["tool"] = fast_path::TOOL.into();
        let m = markdown(&docs).unwrap();
        assert!(m.starts_with("medians of 3 runs of benches/seeds/seed003-fast-path.sh\n"));
        docs[2] = result("seed000-llc-steering-1");
        assert!(markdown(&docs).is_err());
        assert!(markdown(&[]).is_err());
        // The kernel-socket script's results have no tool, only their seed.
        let mut tcp = three("seed000-kernel-sockets");
        tcp[2]["tool"] = tcp_llc_updates::TOOL.into();
        let m = markdown(&tcp).unwrap();
        assert!(m.starts_with("medians of 3 runs of benches/seeds/seed000-kernel-sockets.sh\n"));
        tcp[1] = result("seed000-llc-steering-2");
        let e = markdown(&tcp).unwrap_err().to_string();
        assert!(e.contains("not from"), "{e}");
        let mut unknown = result("seed000-llc-steering-1");
        unknown["tool"] = "something else".into();
        assert!(markdown(&[unknown])
            .unwrap_err()
            .to_string()
            .contains("unknown tool"));
    }

    #[test]
    fn medians_of_an_even_count_and_missing_values() {
        let mut docs = three("seed002-004-false-sharing");
        docs.pop();
        // Two runs: the mean of the two; a run without numbers is skipped.
        let m = markdown(&docs).unwrap();
        let want = round_to(
            median(docs.iter().map(|d| {
                indexed(
                    d["criterion"].as_array().unwrap().iter(),
                    "id",
                    "steer/flow_table/lookup/hit",
                )
                .and_then(|c| num(c, "/median_ns"))
            })),
            0,
        );
        assert!(
            m.contains(&format!("| steer/flow_table/lookup/hit | {want} |")),
            "{m}"
        );
        docs[1]["replica"] = Value::Array(vec![]);
        let m = markdown(&docs).unwrap();
        assert!(
            m.contains("lookups 3.88x"),
            "one run left: its own ratio\n{m}"
        );
        docs[0]["replica"] = Value::Array(vec![]);
        let m = markdown(&docs).unwrap();
        assert!(m.contains("| split | - | - | - | - |"), "{m}");
    }
}
