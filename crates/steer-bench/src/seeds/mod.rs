//! The seed reproductions (`steer-bench seed ...`): one command per
//! kernel-list seed the product is built from, each named by what it
//! measures, each printing one table and, with `--json FILE`, writing every
//! number plus the final counters of the steer process it drove; and
//! `steer-bench seed medians`, the medians over several runs' JSON as
//! Markdown (the tables of benches/seeds/README.md).
//!
//! ```text
//! steer-bench seed llc-updates       steering-hook calls, policy always vs llc  (root)
//! steer-bench seed tcp-llc-updates   the same for kernel TCP sockets: map updates (root)
//! steer-bench seed sockmap-affinity  pinned proxy, client on a worker's CPU     (root)
//! steer-bench seed false-sharing     split vs packed counters
//! steer-bench seed fast-path         same-CPU fast path on vs off               (root)
//! steer-bench seed medians FILE.json...
//! ```
//!
//! Each seed also answers to the seed's number (`000`, `000-tcp`, `001`,
//! `002-004`, `003`), a hidden alias; the JSON `tool` keeps that form, so
//! every result reads alike.
//!
//! Every seed takes `--quick` (the CI smoke: short windows, numbers not
//! meaningful), `--runs N` (N runs one after the other, then their
//! medians), `--json FILE`, `--keep-logs DIR`. Exit status: 0 ok, 1 setup
//! error, 2 a run produced no numbers, 3 goal not met (with
//! `--require-goal`: llc-updates, tcp-llc-updates, fast-path), 130
//! interrupted.
//!
//! Invariants: one seed measurement at a time (the seeds lock); every
//! namespace, veth pair, XDP program and process a run makes is removed on
//! every exit path (their owners' `Drop`); every result carries
//! `"format": 1`, and results written by the shell scripts this command
//! replaced read the same way.

pub mod criterion;
pub mod false_sharing;
pub mod fast_path;
pub mod harness;
pub mod llc_updates;
pub mod medians;
pub mod sharing_replica;
pub mod sockmap_affinity;
pub mod tcp_llc_updates;
pub mod udp_flows;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::atomic::AtomicBool,
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::netns::TestBed;
use crate::procs::{self, Proc, Spawn};
use harness::Harness;
use udp_flows::{FlowsConfig, FlowsResult};

/// Options every seed takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Also write every number (and the final counters of the steer
    /// processes) as JSON; with `--runs N`: FILE-1.json ... FILE-N.json.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep every log in this directory (run-N/ with `--runs N`).
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
    /// Runs one after the other; with more than one, their medians follow.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=50))]
    pub runs: u16,
    /// steer's source tree: where the criterion benches build and run, and
    /// whose commit the JSON records (default: the tree this binary was
    /// built from).
    #[arg(long, env = "STEER_SRC", value_name = "DIR")]
    pub src: Option<PathBuf>,
}

/// Options of the seeds that drive the `steer` command.
#[derive(Debug, Clone, Args)]
pub struct SteerRun {
    /// The `steer` command (default: the one next to this binary).
    #[arg(long, env = "STEER")]
    pub steer: Option<PathBuf>,
    /// Output, runs, source tree.
    #[command(flatten)]
    pub common: Common,
}

impl SteerRun {
    /// The `steer` command and the source tree to record (see
    /// [`harness::steer_binary`], [`harness::source_tree`]).
    pub fn paths(&self) -> Result<(PathBuf, PathBuf)> {
        Ok((
            harness::steer_binary(self.steer.as_deref())?,
            harness::source_tree(self.common.src.as_deref())?,
        ))
    }
}

/// Whether the part `key` of a seed ran: `/config/KEY` of its result, true
/// when absent (a run that did every part records no flag).
pub fn config_flag(doc: &Value, key: &str) -> bool {
    doc.pointer(&format!("/config/{key}"))
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

/// What one run of a seed produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The table it prints.
    pub table: String,
    /// Its JSON document.
    pub doc: Value,
    /// Its exit status (0, 2 missing numbers, 3 goal not met).
    pub status: u8,
}

impl Outcome {
    /// The outcome of a run whose JSON document is `doc`: its table, and
    /// the exit status: 3 when the goal was required and missed, else 2
    /// when a configuration produced no numbers, else 0.
    pub fn new(doc: Value, table: fn(&Value) -> String, failed: bool, goal_missed: bool) -> Self {
        let status = if goal_missed {
            3
        } else if failed {
            2
        } else {
            0
        };
        Outcome {
            table: table(&doc),
            doc,
            status,
        }
    }
}

/// `steer-bench seed ...`.
#[derive(Debug, Subcommand)]
pub enum SeedCmd {
    /// Steering-hook calls and proxy CPU, policy always vs llc, under tokio
    /// work-stealing with many flows (root).
    #[command(name = "llc-updates", alias = "000")]
    LlcUpdates(llc_updates::LlcUpdates),
    /// The same for kernel TCP sockets: XDP RFS map updates and their cost,
    /// policy always vs llc, `steer tcp-echo` under tokio work-stealing
    /// (root).
    #[command(name = "tcp-llc-updates", alias = "000-tcp")]
    TcpLlcUpdates(tcp_llc_updates::TcpLlcUpdates),
    /// A proxy's forward rate when its client shares a worker's CPU,
    /// workers pinned / unpinned / traffic on the other worker (root).
    #[command(name = "sockmap-affinity", alias = "001")]
    SockmapAffinity(sockmap_affinity::SockmapAffinity),
    /// Lookups and counter increments under two threads, counters split
    /// onto their own cache line vs packed (criterion and a replica).
    #[command(name = "false-sharing", alias = "002-004")]
    FalseSharing(false_sharing::FalseSharing),
    /// Ring enqueues per packet with the same-CPU fast path on vs off, end
    /// to end (root) and in criterion.
    #[command(name = "fast-path", alias = "003")]
    FastPath(fast_path::FastPath),
    /// Medians over several `--json` outputs of one seed, as Markdown.
    Medians {
        /// The outputs (all of one seed).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Runs a `steer-bench seed` command.
pub fn run(cmd: SeedCmd) -> Result<ExitCode> {
    match cmd {
        SeedCmd::LlcUpdates(a) => repeat("llc-updates", &a.run.common, |h| {
            llc_updates::run_once(&a, h)
        }),
        SeedCmd::TcpLlcUpdates(a) => repeat("tcp-llc-updates", &a.run.common, |h| {
            tcp_llc_updates::run_once(&a, h)
        }),
        SeedCmd::SockmapAffinity(a) => repeat("sockmap-affinity", &a.run.common, |h| {
            sockmap_affinity::run_once(&a, h)
        }),
        SeedCmd::FalseSharing(a) => repeat("false-sharing", &a.common, |h| {
            false_sharing::run_once(&a, h)
        }),
        SeedCmd::FastPath(a) => repeat("fast-path", &a.run.common, |h| fast_path::run_once(&a, h)),
        SeedCmd::Medians { files } => {
            let docs = files
                .iter()
                .map(|f| {
                    let text = std::fs::read_to_string(f)
                        .with_context(|| format!("{}: not readable", f.display()))?;
                    serde_json::from_str(&text)
                        .with_context(|| format!("{}: not JSON", f.display()))
                })
                .collect::<Result<Vec<Value>>>()?;
            print!("{}", medians::markdown(&docs)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// FILE for run `i` of `runs`: FILE itself for one run, else FILE-i.ext.
pub fn json_path(file: &Path, i: u16, runs: u16) -> PathBuf {
    if runs <= 1 {
        return file.into();
    }
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match file.extension() {
        Some(e) => format!("{stem}-{i}.{}", e.to_string_lossy()),
        None => format!("{stem}-{i}"),
    };
    file.with_file_name(name)
}

fn repeat(
    name: &'static str,
    c: &Common,
    mut once: impl FnMut(&Harness) -> Result<Outcome>,
) -> Result<ExitCode> {
    let mut docs = Vec::new();
    let mut status = 0u8;
    for i in 1..=c.runs {
        let keep = c.keep_logs.as_ref().map(|k| {
            if c.runs > 1 {
                k.join(format!("run-{i}"))
            } else {
                k.clone()
            }
        });
        let h = Harness::new(name, keep)?;
        if c.runs > 1 {
            h.log(&format!("run {i} of {}", c.runs));
        }
        let out = once(&h)?;
        print!("{}", out.table);
        if let Some(f) = &c.json {
            let path = json_path(f, i, c.runs);
            std::fs::write(&path, serde_json::to_string_pretty(&out.doc)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            h.log(&format!("JSON in {}", path.display()));
        }
        status = status.max(out.status);
        docs.push(out.doc);
    }
    if docs.len() > 1 {
        println!("{}", medians::markdown(&docs)?);
    }
    Ok(ExitCode::from(status))
}

/// The strings of the list `/config/KEY` of a result, `default` when it
/// has none (a run that did every part records no list).
pub fn config_list(doc: &Value, key: &str, default: &[&str]) -> Vec<String> {
    match doc
        .pointer(&format!("/config/{key}"))
        .and_then(Value::as_array)
    {
        Some(l) => l
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        None => default.iter().map(|&d| d.to_owned()).collect(),
    }
}

/// A seed's result: its `tool`, `"format": 1`, the machine and `src` as
/// `host` ([`harness::host_json`]), then the fields of `rest` in order.
pub fn result_doc(tool: &str, src: &Path, rest: Value) -> Value {
    let mut doc = serde_json::json!({
        "tool": tool,
        "format": 1,
        "host": harness::host_json(src),
    });
    if let (Some(d), Value::Object(rest)) = (doc.as_object_mut(), rest) {
        d.extend(rest);
    }
    doc
}

/// Sorts a seed's runs by two of their fields (as `"A-B"` text): the order
/// results list them in.
pub fn sort_runs(runs: &mut [Value], a: &str, b: &str) {
    runs.sort_by_key(|r| {
        format!(
            "{}-{}",
            crate::num::raw(r.get(a)),
            crate::num::raw(r.get(b))
        )
    });
}

/// The first run in `runs` (a JSON array) that `pick` accepts.
pub fn find_run(runs: &Value, pick: impl Fn(&Value) -> bool) -> Option<&Value> {
    runs.as_array()?.iter().find(|r| pick(r))
}

/// Starts the generator in a thread inside `bed`'s namespace, pinned to
/// `pin` when given.
pub fn spawn_generator(
    bed: &TestBed,
    cfg: FlowsConfig,
    pin: Option<usize>,
    stop: &'static AtomicBool,
) -> JoinHandle<Result<FlowsResult>> {
    let enter = TestBed::enter_fn(&bed.ns);
    std::thread::spawn(move || {
        enter()?;
        if let Some(cpu) = pin {
            crate::sys::pin(cpu).with_context(|| format!("pinning the generator to CPU {cpu}"))?;
        }
        udp_flows::run(&cfg, stop)
    })
}

/// Waits for the generator; logs why when it failed. Its `key=value`
/// summary goes to `<tag>-gen.kv` in the work directory.
pub fn join_generator(
    h: &Harness,
    tag: &str,
    g: JoinHandle<Result<FlowsResult>>,
) -> Option<FlowsResult> {
    match g.join() {
        Ok(Ok(r)) => {
            let _ = std::fs::write(h.path(&format!("{tag}-gen.kv")), r.to_kv());
            Some(r)
        }
        Ok(Err(e)) => {
            h.log(&format!("{tag}: the generator failed: {e:#}"));
            None
        }
        Err(_) => {
            h.log(&format!("{tag}: the generator panicked"));
            None
        }
    }
}

/// `sockperf server` on 127.0.0.1:`port`, the proxies' backend.
pub fn start_backend(h: &Harness, port: u16) -> Result<Proc> {
    let argv = [
        "sockperf",
        "server",
        "-i",
        "127.0.0.1",
        "-p",
        &port.to_string(),
    ]
    .map(String::from);
    let mut p = Proc::spawn(
        "the sockperf backend",
        &argv,
        &h.path("backend.log"),
        &Spawn::default(),
    )?;
    let lo = std::net::Ipv4Addr::LOCALHOST;
    if !harness::wait_udp_bound(lo, port, Duration::from_secs(10), || p.alive()) {
        bail!(
            "the sockperf backend did not bind 127.0.0.1:{port}: {}",
            procs::tail(&p.log, 5)
        );
    }
    Ok(p)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/seeds")
    }

    /// A captured output in benches/seeds/fixtures.
    pub fn fixture(name: &str) -> String {
        let p = dir().join("fixtures").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Checks that `table` of each committed run `{result}-{1,2,3}` prints
    /// the captured `{fixture}-{1,2,3}.txt`, then runs `more(run, doc)`.
    pub fn committed_tables(
        result_stem: &str,
        fixture_stem: &str,
        table: fn(&Value) -> String,
        more: impl Fn(u32, &Value),
    ) {
        for n in 1..=3 {
            let doc = result(&format!("{result_stem}-{n}"));
            assert_eq!(
                table(&doc),
                fixture(&format!("{fixture_stem}-{n}.txt")),
                "{result_stem}: run {n}"
            );
            more(n, &doc);
        }
    }

    /// A committed result in benches/seeds/results.
    pub fn result(name: &str) -> Value {
        let p = dir().join("results").join(format!("{name}.json"));
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    }

    #[test]
    fn the_status_says_goal_then_missing_numbers() {
        let t = |d: &Value| format!("table of {d}");
        let o = Outcome::new(Value::from(1), t, false, false);
        assert_eq!((o.status, o.table.as_str()), (0, "table of 1"));
        assert_eq!(Outcome::new(Value::Null, t, true, false).status, 2);
        assert_eq!(Outcome::new(Value::Null, t, false, true).status, 3);
        assert_eq!(Outcome::new(Value::Null, t, true, true).status, 3);
    }

    #[test]
    fn config_lists_and_their_default() {
        let doc = serde_json::json!({"config": {"layouts": ["multi", 3]}});
        assert_eq!(config_list(&doc, "layouts", &["a"]), ["multi"]);
        assert_eq!(config_list(&doc, "other", &["a", "b"]), ["a", "b"]);
        let flags = serde_json::json!({"config": {"replica": false, "e2e": "yes"}});
        assert!(!config_flag(&flags, "replica"));
        assert!(config_flag(&flags, "criterion"), "absent: it ran");
        assert!(config_flag(&flags, "e2e"), "not a bool: taken as ran");
        let runs = serde_json::json!([{"n": 1}, {"n": 2}, {"n": 2, "x": 0}]);
        assert_eq!(find_run(&runs, |r| r["n"] == 2), Some(&runs[1]));
        assert_eq!(find_run(&runs, |r| r["n"] == 3), None);
        assert_eq!(find_run(&Value::Null, |_| true), None);
    }

    #[test]
    fn result_documents_and_run_order() {
        let doc = result_doc(
            "t",
            Path::new("/"),
            serde_json::json!({"config": 1, "runs": []}),
        );
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["tool", "format", "host", "config", "runs"]);
        assert_eq!(
            (doc["tool"].as_str(), doc["format"].as_i64()),
            (Some("t"), Some(1))
        );
        let mut runs = vec![
            serde_json::json!({"t": "real", "p": "llc"}),
            serde_json::json!({"t": "override", "p": "llc"}),
            serde_json::json!({"t": "real", "p": "always"}),
        ];
        sort_runs(&mut runs, "t", "p");
        let order: Vec<String> = runs
            .iter()
            .map(|r| format!("{}/{}", r["t"], r["p"]))
            .collect();
        assert_eq!(
            order,
            [
                r#""override"/"llc""#,
                r#""real"/"always""#,
                r#""real"/"llc""#
            ]
        );
    }

    #[test]
    fn json_paths_per_run() {
        let f = Path::new("out/seed000.json");
        assert_eq!(json_path(f, 1, 1), PathBuf::from("out/seed000.json"));
        assert_eq!(json_path(f, 2, 3), PathBuf::from("out/seed000-2.json"));
        assert_eq!(json_path(Path::new("x"), 3, 3), PathBuf::from("x-3"));
    }
}
