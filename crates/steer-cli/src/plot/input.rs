//! What `steer plot` reads: a steer-bench `--json` report ([`BenchReport`])
//! or the `--json` files of seed 000 ([`Seed000Run`]), recognised
//! by their `tool` field and turned into plain numbers. Anything else is a
//! one-line error that names the file and what was expected.

use std::path::Path;

use serde_json::Value;

/// One server of a steer-bench report.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchServer {
    /// Its name (`steer`, `kernel-echo`, `sockperf`, `reflector`, ...).
    pub name: String,
    /// Replies a second at the maximum offered rate.
    pub capacity_pps: Option<f64>,
    /// Per fixed rate: the rate, whole-machine CPU us per reply, the same
    /// minus the reflector's (the server's own).
    pub cost: Vec<(f64, Option<f64>, Option<f64>)>,
    /// p99 latency at the latency rate, in us.
    pub p99_us: Option<f64>,
}

impl BenchServer {
    /// Whether it is one of the kernel's servers (the baseline).
    pub fn is_kernel(&self) -> bool {
        matches!(
            self.name.as_str(),
            "kernel-echo" | "sockperf" | "kernel-proxy"
        )
    }

    /// Whether it is steer.
    pub fn is_steer(&self) -> bool {
        self.name.starts_with("steer")
    }
}

/// A steer-bench report: its servers in report order.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// The servers measured.
    pub servers: Vec<BenchServer>,
}

/// One file of seed 000: steering updates a second, per run of the script.
#[derive(Debug, Clone, PartialEq)]
pub struct Seed000Run {
    /// (series, steering-hook calls a second over the window): one per
    /// topology and policy, e.g. `machine's topology (1 LLC), always`.
    pub series: Vec<(String, f64)>,
}

/// A scatter: labelled points in series (steer-bench frontier's report:
/// x CPU us per reply, y p99 us).
#[derive(Debug, Clone, PartialEq)]
pub struct Scatter {
    /// The picture's title.
    pub title: String,
    /// The axes' names.
    pub x_label: String,
    /// See `x_label`.
    pub y_label: String,
    /// (series, label, x, y), points without both numbers left out.
    pub points: Vec<(String, String, f64, f64)>,
}

/// A file `steer plot` understands.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// steer-bench's report.
    Bench(BenchReport),
    /// Seed 000's report (`steer-bench seed 000`, or the earlier
    /// seed000-llc-steering.sh).
    Seed000(Seed000Run),
    /// A scatter (`steer-bench frontier --json`).
    Scatter(Scatter),
}

/// Reads and recognises `path`.
pub fn read(path: &Path) -> anyhow::Result<Input> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Recognises one JSON document.
pub fn parse(text: &str) -> Result<Input, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let tool = v.get("tool").and_then(Value::as_str).unwrap_or("");
    if tool == "steer-bench" {
        return bench(&v).map(Input::Bench);
    }
    if tool == "steer-bench frontier" {
        return scatter(&v).map(Input::Scatter);
    }
    if tool == "steer-bench seed 000" || tool.ends_with("seed000-llc-steering.sh") {
        return seed000(&v).map(Input::Seed000);
    }
    Err(format!(
        "not a report steer plot reads (tool {tool:?}): give steer-bench's `--json` output or \
         seed 000's (`steer-bench seed 000 --json`)"
    ))
}

fn scatter(v: &Value) -> Result<Scatter, String> {
    let text = |k: &str, d: &str| v.get(k).and_then(Value::as_str).unwrap_or(d).to_owned();
    let points = v
        .get("points")
        .and_then(Value::as_array)
        .ok_or("a frontier report without `points`")?
        .iter()
        .filter_map(|p| {
            let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            Some((s("series"), s("label"), num(p, &["x"])?, num(p, &["y"])?))
        })
        .collect();
    Ok(Scatter {
        title: text("title", "steer-bench frontier"),
        x_label: text("x_label", "x"),
        y_label: text("y_label", "y"),
        points,
    })
}

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn bench(v: &Value) -> Result<BenchReport, String> {
    let summary = v
        .get("summary")
        .and_then(Value::as_array)
        .ok_or("a steer-bench report without `summary`")?;
    let servers: Vec<BenchServer> = summary
        .iter()
        .map(|s| {
            let name = s
                .get("server")
                .and_then(Value::as_str)
                .ok_or("a summary entry without `server`")?;
            let cost = s
                .get("cost")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .filter_map(|c| {
                            Some((
                                num(c, &["rate_pps"])?,
                                num(c, &["us_per_reply"]),
                                num(c, &["own_us_per_reply"]),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(BenchServer {
                name: name.into(),
                capacity_pps: num(s, &["capacity_pps"]),
                cost,
                p99_us: num(s, &["latency_us", "p99"]),
            })
        })
        .collect::<Result<_, &str>>()?;
    if servers.is_empty() {
        return Err("a steer-bench report with no server".into());
    }
    Ok(BenchReport { servers })
}

fn seed000(v: &Value) -> Result<Seed000Run, String> {
    let runs = v
        .get("runs")
        .and_then(Value::as_array)
        .ok_or("a seed 000 report without `runs`")?;
    let series: Vec<(String, f64)> = runs
        .iter()
        .map(|r| {
            let topology = r.get("topology").and_then(Value::as_str);
            let policy = r.get("policy").and_then(Value::as_str);
            let rate = num(r, &["window", "hook_calls_per_s"]);
            match (topology, policy, rate) {
                (Some(t), Some(p), Some(x)) => Ok((format!("{}, {p}", topology_name(t)), x)),
                _ => Err("a seed 000 run without topology, policy or window.hook_calls_per_s"),
            }
        })
        .collect::<Result<_, _>>()?;
    if series.is_empty() {
        return Err("a seed 000 report with no run".into());
    }
    Ok(Seed000Run { series })
}

/// Seed 000's topology names as a reader understands them: `real` is the
/// machine's (one LLC here), `override` the model with each CPU in an LLC
/// of its own.
fn topology_name(t: &str) -> String {
    match t {
        "real" => "machine's topology (1 LLC)".into(),
        "override" => "model: CPUs in 2 LLCs".into(),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frontier_report_is_a_scatter() {
        let text = r#"{"tool": "steer-bench frontier", "x_label": "cpu", "y_label": "p99",
            "points": [{"series": "steer", "label": "steer sleep @50k", "x": 7.5, "y": 80.0},
                       {"series": "kernel-echo", "label": "k @50k", "x": null, "y": 9.0}]}"#;
        let Ok(Input::Scatter(s)) = parse(text) else {
            panic!("not a scatter")
        };
        assert_eq!((s.x_label.as_str(), s.y_label.as_str()), ("cpu", "p99"));
        assert_eq!(
            s.points,
            [("steer".into(), "steer sleep @50k".into(), 7.5, 80.0)]
        );
        assert!(parse(r#"{"tool": "steer-bench frontier"}"#)
            .unwrap_err()
            .contains("without `points`"));
    }

    #[test]
    fn bad_input_is_one_clear_line() {
        for (text, want) in [
            ("{", "not JSON"),
            ("[1,2]", "not a report"),
            (r#"{"tool":"x"}"#, "tool \"x\""),
            (r#"{"tool":"steer-bench"}"#, "without `summary`"),
            (r#"{"tool":"steer-bench","summary":[]}"#, "no server"),
            (
                r#"{"tool":"a/seed000-llc-steering.sh","runs":[{}]}"#,
                "without topology",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{text}: {e}");
        }
    }

    #[test]
    fn seed000_of_steer_bench_and_of_the_earlier_script() {
        let runs =
            r#""runs":[{"topology":"override","policy":"llc","window":{"hook_calls_per_s":5}}]"#;
        for tool in [
            "steer-bench seed 000",
            "benches/seeds/seed000-llc-steering.sh",
        ] {
            let text = format!(r#"{{"tool":"{tool}",{runs}}}"#);
            assert!(matches!(parse(&text), Ok(Input::Seed000(_))), "{tool}");
        }
        // Seed 000 for kernel sockets is another report (no hook calls).
        let e = parse(r#"{"seed":"000-kernel-sockets","runs":[]}"#).unwrap_err();
        assert!(e.contains("steer-bench seed 000 --json"), "{e}");
    }

    #[test]
    fn a_seed000_run_has_one_series_per_topology_and_policy() {
        let text = r#"{"tool":"benches/seeds/seed000-llc-steering.sh","runs":[
            {"topology":"real","policy":"always","window":{"hook_calls_per_s":1994.2}},
            {"topology":"real","policy":"llc","window":{"hook_calls_per_s":0}}]}"#;
        assert_eq!(
            parse(text).unwrap(),
            Input::Seed000(Seed000Run {
                series: vec![
                    ("machine's topology (1 LLC), always".into(), 1994.2),
                    ("machine's topology (1 LLC), llc".into(), 0.0)
                ]
            })
        );
    }
}
