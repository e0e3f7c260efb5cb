//! steer's criterion benches as the seeds use them: built in the source
//! tree (`cargo bench --no-default-features --bench NAME --no-run`), run
//! with a filter (shorter with `--quick`), and their results read back from
//! `<target>/criterion/**/new/{benchmark,estimates}.json`.
//!
//! Invariant: only results written by this run count: a result older than
//! the run's start (a previous run's) is never reported as this one's.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::SystemTime,
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::harness::Harness;

/// One bench's median and its 95% confidence interval, ns per iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Median, ns.
    pub median_ns: f64,
    /// Lower bound of the confidence interval, ns.
    pub ci_lower_ns: f64,
    /// Upper bound, ns.
    pub ci_upper_ns: f64,
    /// Elements per iteration (criterion's throughput; 1 when none).
    pub elements: f64,
}

impl Estimate {
    /// The estimate as a seed's result records it: `name: value` first,
    /// then the median and its interval, then the fields of `more` (an
    /// object), in order.
    pub fn to_json(&self, name: &str, value: Value, more: Value) -> Value {
        let mut m = serde_json::Map::new();
        m.insert(name.to_owned(), value);
        m.insert("median_ns".into(), self.median_ns.into());
        m.insert("ci_lower_ns".into(), self.ci_lower_ns.into());
        m.insert("ci_upper_ns".into(), self.ci_upper_ns.into());
        if let Value::Object(more) = more {
            m.extend(more);
        }
        Value::Object(m)
    }
}

/// The benches of one source tree.
#[derive(Debug, Clone)]
pub struct Benches {
    /// Where `cargo bench` runs.
    pub src: PathBuf,
    /// CARGO_TARGET_DIR (`$CARGO_TARGET_DIR`, else `src/target`).
    pub target: PathBuf,
}

impl Benches {
    /// The benches of `src`.
    pub fn new(src: &Path) -> Self {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| src.join("target"));
        Benches {
            src: src.into(),
            target,
        }
    }

    fn cargo(&self, args: &[&str], log: &Path) -> Result<bool> {
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let st = Command::new("cargo")
            .args(args)
            .current_dir(&self.src)
            .env("CARGO_TARGET_DIR", &self.target)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .context("running cargo (the criterion benches need the Rust toolchain)")?;
        Ok(st.success())
    }

    /// Compiles `benches` without running them, so the timed part holds no
    /// build.
    pub fn build(&self, benches: &[&str], log: &Path) -> Result<()> {
        let mut args = vec!["bench", "--no-default-features"];
        for b in benches {
            args.extend(["--bench", b]);
        }
        args.push("--no-run");
        if !self.cargo(&args, log)? {
            bail!(
                "cargo bench --no-run failed in {}: {}",
                self.src.display(),
                crate::procs::tail(log, 10)
            );
        }
        Ok(())
    }

    /// Runs bench `bench` filtered by `filter`; `quick` shortens warm-up and
    /// measurement (1 s / 2 s). Whether cargo succeeded.
    pub fn run(&self, bench: &str, filter: &str, quick: bool, log: &Path) -> Result<bool> {
        let mut args = vec!["bench", "--no-default-features", "--bench", bench, "--"];
        if quick {
            args.extend(["--warm-up-time", "1", "--measurement-time", "2"]);
        }
        args.push(filter);
        self.cargo(&args, log)
    }

    /// The estimate of bench `full_id` (`steer/dispatch/fast_path/on`), if
    /// written at or after `since` (a [`marker`]'s time).
    pub fn estimate(&self, full_id: &str, since: SystemTime) -> Option<Estimate> {
        let mut found = Vec::new();
        walk(&self.target.join("criterion"), &mut found);
        found.into_iter().find_map(|bench_json| {
            let fresh = fs::metadata(&bench_json)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            if !fresh {
                return None;
            }
            let b: Value = serde_json::from_str(&fs::read_to_string(&bench_json).ok()?).ok()?;
            if b["full_id"].as_str() != Some(full_id) {
                return None;
            }
            let e: Value = serde_json::from_str(
                &fs::read_to_string(bench_json.with_file_name("estimates.json")).ok()?,
            )
            .ok()?;
            parse_estimate(&b, &e)
        })
    }
}

/// One criterion bench built and run for a seed run: its results from
/// this run on, and its log.
pub struct BenchRun {
    benches: Benches,
    since: SystemTime,
    /// The `cargo bench` output.
    pub log: PathBuf,
    /// Whether `cargo bench` succeeded (its log's tail is printed when not).
    pub ok: bool,
}

impl BenchRun {
    /// Builds bench `bench` in `src` and runs it filtered to `filter`
    /// (shorter when `quick`), logging each step through `h`; the logs go
    /// to `h`'s work directory (`cargo-build.log`, `criterion-BENCH.log`).
    pub fn start(h: &Harness, src: &Path, bench: &str, filter: &str, quick: bool) -> Result<Self> {
        let benches = Benches::new(src);
        h.log(&format!(
            "building the criterion bench ({bench}) in {} (the first build takes a few minutes)",
            src.display()
        ));
        benches.build(&[bench], &h.path("cargo-build.log"))?;
        h.check()?;
        let since = marker(&h.path("criterion.marker"))?;
        h.log(&format!(
            "criterion: {filter}{}",
            if quick { " (quick)" } else { "" }
        ));
        let log = h.path(&format!("criterion-{bench}.log"));
        let ok = benches.run(bench, filter, quick, &log)?;
        if !ok {
            eprintln!("{}", crate::procs::tail(&log, 20));
            h.log(&format!(
                "cargo bench --bench {bench} failed (output above)"
            ));
        }
        h.check()?;
        Ok(BenchRun {
            benches,
            since,
            log,
            ok,
        })
    }

    /// The estimate of `id` this run wrote; its absence is logged.
    pub fn estimate(&self, h: &Harness, id: &str) -> Option<Estimate> {
        let e = self.benches.estimate(id, self.since);
        if e.is_none() {
            h.log(&format!("no criterion result for {id}"));
        }
        e
    }

    /// The `cargo bench` output (empty when unreadable).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Writes the file `path` and returns its modification time: the start of
/// a bench run on the file system's clock (coarser than the system clock,
/// so results are compared with this, never with `SystemTime::now()`).
pub fn marker(path: &Path) -> Result<SystemTime> {
    fs::write(path, b"")?;
    Ok(fs::metadata(path)?.modified()?)
}

/// The [`Estimate`] in criterion's `benchmark.json` and `estimates.json`.
pub fn parse_estimate(benchmark: &Value, estimates: &Value) -> Option<Estimate> {
    let m = &estimates["median"];
    Some(Estimate {
        median_ns: m["point_estimate"].as_f64()?,
        ci_lower_ns: m["confidence_interval"]["lower_bound"].as_f64()?,
        ci_upper_ns: m["confidence_interval"]["upper_bound"].as_f64()?,
        elements: benchmark["throughput"]["Elements"].as_f64().unwrap_or(1.0),
    })
}

/// Every `new/benchmark.json` under `dir`.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.ends_with("new/benchmark.json") {
            out.push(p);
        }
    }
}

/// The number the dispatch bench prints after `<id>: ring enqueues per
/// packet` (its last such line in `log`).
pub fn printed_enqueues(log: &str, id: &str) -> Option<f64> {
    let key = format!("{id}: ring enqueues per packet ");
    log.lines().rev().find_map(|l| {
        let n: String = l
            .strip_prefix(&key)?
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        n.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_estimate_as_json_keeps_its_order() {
        let e = Estimate {
            median_ns: 2.0,
            ci_lower_ns: 1.0,
            ci_upper_ns: 3.0,
            elements: 4.0,
        };
        let j = e.to_json("id", "x".into(), serde_json::json!({"per": 0.5}));
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["id", "median_ns", "ci_lower_ns", "ci_upper_ns", "per"]
        );
        assert_eq!(j["per"], 0.5);
        let bare = e.to_json("id", "x".into(), Value::Null);
        assert_eq!(bare.as_object().unwrap().len(), 4);
    }

    #[test]
    fn estimates_and_freshness() {
        let dir = std::env::temp_dir().join(format!("sb-crit-{}", std::process::id()));
        let new = dir.join("criterion/steer_x/on/new");
        fs::create_dir_all(&new).unwrap();
        let since = marker(&dir.join("marker")).unwrap();
        fs::write(
            new.join("benchmark.json"),
            json!({"full_id": "steer/x/on", "throughput": {"Elements": 64}}).to_string(),
        )
        .unwrap();
        fs::write(
            new.join("estimates.json"),
            json!({"median": {"point_estimate": 1840.0,
                "confidence_interval": {"lower_bound": 1722.5, "upper_bound": 1774.0}}})
            .to_string(),
        )
        .unwrap();
        let b = Benches {
            src: dir.clone(),
            target: dir.clone(),
        };
        let e = b.estimate("steer/x/on", since).unwrap();
        assert_eq!(e.median_ns, 1840.0);
        assert_eq!(
            (e.ci_lower_ns, e.ci_upper_ns, e.elements),
            (1722.5, 1774.0, 64.0)
        );
        assert!(b.estimate("steer/x/off", since).is_none());
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        assert!(b.estimate("steer/x/on", later).is_none(), "a stale result");
        fs::remove_dir_all(&dir).unwrap();
        // No throughput: one element per iteration.
        let e = parse_estimate(
            &json!({"throughput": null}),
            &json!({"median": {"point_estimate": 3.0, "confidence_interval": {"lower_bound": 2.0, "upper_bound": 4.0}}}),
        )
        .unwrap();
        assert_eq!(e.elements, 1.0);
    }

    #[test]
    fn enqueue_lines() {
        let log = "steer/dispatch/fast_path/on: ring enqueues per packet 0.500 (x)\n\
                   steer/dispatch/fast_path/on: ring enqueues per packet 0.000 (x)\n\
                   steer/dispatch/fast_path/off: ring enqueues per packet 1.000\n";
        assert_eq!(
            printed_enqueues(log, "steer/dispatch/fast_path/on"),
            Some(0.0)
        );
        assert_eq!(
            printed_enqueues(log, "steer/dispatch/fast_path/off"),
            Some(1.0)
        );
        assert_eq!(printed_enqueues(log, "steer/dispatch/fast_path/x"), None);
    }
}
