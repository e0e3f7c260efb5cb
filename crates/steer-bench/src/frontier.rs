//! `steer-bench frontier`: latency against CPU. At each rate, steer's echo
//! server in each idle policy (a few windows and budgets of each) and the
//! kernel echo plain, with GRO on its veth end (veth's NAPI), and on that
//! NAPI with SO_BUSY_POLL or the device's interrupt deferral, interleaved across runs (run 1 visits every point,
//! then run 2, ...); each point is the server's own CPU time per reply
//! (its threads' `sum_exec_runtime`) against its p50 and p99, and whether
//! the generator held the rate. The JSON is what `steer plot` draws as a
//! scatter (x: CPU us per reply, y: p99 us, a series per server kind).
//!
//! Invariants: the point list is fixed and every label is unique; a
//! point's medians are over the runs that held the rate when any did
//! (otherwise over all, flagged not held); a deferral setting is restored
//! after its point.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{
    bench::{Bed, BenchConfig},
    num::median_of,
    servers::Kind,
    table::Layout,
};

/// A device's interrupt deferral for a kernel point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NapiDefer {
    /// `napi_defer_hard_irqs`: empty polls before interrupts come back.
    pub defer_hard_irqs: u32,
    /// `gro_flush_timeout`, nanoseconds: the timer that polls meanwhile.
    pub gro_flush_timeout_ns: u64,
}

/// One configuration on the frontier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The server kind (the plot's series).
    pub server: Kind,
    /// Its label (unique).
    pub label: String,
    /// steer's extra `steer echo` flags.
    pub steer_args: Vec<String>,
    /// The kernel echo's SO_BUSY_POLL, us.
    pub busy_poll_us: u32,
    /// The device's interrupt deferral (the kernel points, and steer's
    /// preferred busy polling).
    pub napi_defer: Option<NapiDefer>,
    /// GRO on the server's veth end: veth then receives through NAPI,
    /// whose packets carry the NAPI id busy polling needs and whose polls
    /// interrupt deferral defers (without it both are no-ops on veth).
    pub veth_napi: bool,
}

fn steer(label: &str, args: &[&str]) -> Point {
    Point {
        server: Kind::Steer,
        label: label.into(),
        steer_args: args.iter().map(|a| (*a).to_owned()).collect(),
        busy_poll_us: 0,
        napi_defer: None,
        veth_napi: false,
    }
}

fn kernel(label: &str, busy_poll_us: u32, napi_defer: Option<NapiDefer>, veth_napi: bool) -> Point {
    Point {
        server: Kind::KernelEcho,
        label: label.into(),
        steer_args: Vec::new(),
        busy_poll_us,
        napi_defer,
        veth_napi,
    }
}

/// Every point, in visiting order.
pub fn points() -> Vec<Point> {
    let defer = NapiDefer {
        defer_hard_irqs: 2,
        gro_flush_timeout_ns: 50_000,
    };
    vec![
        steer("steer sleep", &["--idle", "sleep"]),
        steer(
            "steer adaptive 50us/50%",
            &[
                "--idle",
                "adaptive",
                "--spin-max-us",
                "50",
                "--spin-budget",
                "50",
            ],
        ),
        steer(
            "steer adaptive 200us/50%",
            &[
                "--idle",
                "adaptive",
                "--spin-max-us",
                "200",
                "--spin-budget",
                "50",
            ],
        ),
        steer(
            "steer adaptive 200us/100%",
            &[
                "--idle",
                "adaptive",
                "--spin-max-us",
                "200",
                "--spin-budget",
                "100",
            ],
        ),
        steer(
            "steer defer 20us",
            &["--idle", "defer", "--nap-us", "20", "--naps", "2"],
        ),
        steer(
            "steer defer 50us",
            &["--idle", "defer", "--nap-us", "50", "--naps", "2"],
        ),
        steer("steer coalesce (default)", &["--idle", "coalesce"]),
        steer(
            "steer coalesce 100us",
            &["--idle", "coalesce", "--coalesce-max-us", "100"],
        ),
        steer(
            "steer coalesce 50us",
            &["--idle", "coalesce", "--coalesce-max-us", "50"],
        ),
        steer("steer busy-poll", &["--idle", "busy-poll"]),
        Point {
            napi_defer: Some(defer),
            ..steer(
                "steer coalesce prefer-busy-poll 20us napi defer 2x50us",
                &["--idle", "coalesce", "--prefer-busy-poll-us", "20"],
            )
        },
        kernel("kernel-echo", 0, None, false),
        kernel("kernel-echo gro", 0, None, true),
        kernel("kernel-echo gro busy-poll 50us", 50, None, true),
        kernel("kernel-echo gro napi defer 2x50us", 0, Some(defer), true),
    ]
}

/// The points whose label contains one of `only` (all when empty).
pub fn select(points: Vec<Point>, only: &[String]) -> Vec<Point> {
    points
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| p.label.contains(o.as_str())))
        .collect()
}

/// One point at one rate in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// The run (from 1).
    pub run: usize,
    /// The rate asked, pps.
    pub rate: u64,
    /// The point's label.
    pub label: String,
    /// Its server kind.
    pub server: Kind,
    /// The server's own CPU us per reply.
    pub cpu_us: Option<f64>,
    /// Median latency, us.
    pub p50_us: Option<f64>,
    /// 99th percentile, us.
    pub p99_us: Option<f64>,
    /// Whether the generator held the rate.
    pub held: bool,
    /// What it offered, pps.
    pub offered_pps: f64,
    /// Why not held, or why nothing was measured.
    pub note: Option<String>,
}

/// One point at one rate: the medians of its runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The rate, pps.
    pub rate: u64,
    /// The point's label.
    pub label: String,
    /// Its server kind (the series).
    pub series: String,
    /// Median own CPU us per reply.
    pub cpu_us: Option<f64>,
    /// Median p50, us.
    pub p50_us: Option<f64>,
    /// Median p99, us.
    pub p99_us: Option<f64>,
    /// Runs that held the rate / runs.
    pub held_runs: usize,
    /// Runs measured.
    pub runs: usize,
}

impl Summary {
    /// Whether every run held the rate.
    pub fn held(&self) -> bool {
        self.runs > 0 && self.held_runs == self.runs
    }
}

/// The medians of every (rate, point) of `measured`, in `rates` then
/// `points` order.
pub fn summarize(measured: &[Measured], rates: &[u64], points: &[Point]) -> Vec<Summary> {
    let mut out = Vec::new();
    for &rate in rates {
        for p in points {
            let all: Vec<&Measured> = measured
                .iter()
                .filter(|m| m.rate == rate && m.label == p.label)
                .collect();
            let held: Vec<&Measured> = all.iter().copied().filter(|m| m.held).collect();
            let use_: &[&Measured] = if held.is_empty() { &all } else { &held };
            let med = |f: fn(&Measured) -> Option<f64>| {
                median_of(&use_.iter().filter_map(|m| f(m)).collect::<Vec<_>>())
            };
            out.push(Summary {
                rate,
                label: p.label.clone(),
                series: p.server.name().into(),
                cpu_us: med(|m| m.cpu_us),
                p50_us: med(|m| m.p50_us),
                p99_us: med(|m| m.p99_us),
                held_runs: held.len(),
                runs: all.len(),
            });
        }
    }
    out
}

fn rate_label(rate: u64) -> String {
    if rate.is_multiple_of(1000) {
        format!("{}k", rate / 1000)
    } else {
        rate.to_string()
    }
}

/// The JSON document `steer plot` draws: `tool` "steer-bench frontier",
/// the axes, one entry per (rate, point) in `points` with its series,
/// label (`LABEL @RATE`), x (CPU us per reply), y (p99 us), p50 and
/// whether the rate was held; every run's numbers in `measured`.
pub fn json(config: Value, sums: &[Summary], measured: &[Measured]) -> Value {
    let points: Vec<Value> = sums
        .iter()
        .map(|s| {
            json!({
                "series": s.series,
                "label": format!("{} @{}", s.label, rate_label(s.rate)),
                "rate": s.rate,
                "x": s.cpu_us,
                "y": s.p99_us,
                "p50_us": s.p50_us,
                "held": s.held(),
                "held_runs": s.held_runs,
                "runs": s.runs,
            })
        })
        .collect();
    json!({
        "tool": "steer-bench frontier",
        "title": "latency vs CPU (steer-bench frontier)",
        "x_label": "server CPU us per reply",
        "y_label": "p99 latency, us",
        "config": config,
        "points": points,
        "measured": measured,
    })
}

/// The text table: a row per (rate, point).
pub fn table(sums: &[Summary]) -> String {
    let l = Layout::new(&[8, 32], &[12, 9, 9, 6]);
    let mut t = l.row(&["rate", "point", "CPU us/rep", "p50 us", "p99 us", "held"]) + "\n";
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for s in sums {
        t += &l.row(&[
            rate_label(s.rate),
            s.label.clone(),
            f(s.cpu_us),
            f(s.p50_us),
            f(s.p99_us),
            format!("{}/{}", s.held_runs, s.runs),
        ]);
        t.push('\n');
    }
    t
}

/// Measures every point at every rate, `cfg.runs` times interleaved.
pub fn run(
    cfg: &BenchConfig,
    rates: &[u64],
    points: &[Point],
    stop: &'static AtomicBool,
) -> Result<Vec<Measured>> {
    let mut bed = Bed::open(cfg, stop)?;
    let phases: Vec<Option<u64>> = rates.iter().map(|&r| Some(r)).collect();
    let mut out = Vec::new();
    for run in 1..=cfg.runs {
        for p in points {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            println!("run {run}: {}", p.label);
            let mut env = bed.env.clone();
            env.steer_cmd.extend(p.steer_args.iter().cloned());
            if p.busy_poll_us > 0 {
                env.kernel_echo_args = vec!["--busy-poll-us".into(), p.busy_poll_us.to_string()];
            }
            let _gro = if p.veth_napi {
                Some(crate::napi::GroGuard::on(&env.interface)?)
            } else {
                None
            };
            let _defer = match p.napi_defer {
                Some(d) => Some(crate::napi::DeferGuard::set(
                    &env.interface,
                    d.defer_hard_irqs,
                    d.gro_flush_timeout_ns,
                )?),
                None => None,
            };
            let sr = bed.serve(cfg, run, p.server, &env, &phases)?;
            for &rate in rates {
                let name = crate::report::phase_name(Some(rate));
                let phase = sr.phases.iter().find(|(n, _)| *n == name).map(|(_, ph)| ph);
                out.push(Measured {
                    run,
                    rate,
                    label: p.label.clone(),
                    server: p.server,
                    cpu_us: phase.and_then(|ph| ph.server_cpu_us_per_reply),
                    p50_us: phase.and_then(|ph| ph.latency.map(|l| l.p50_us)),
                    p99_us: phase.and_then(|ph| ph.latency.map(|l| l.p99_us)),
                    held: phase.is_some_and(crate::hold::held),
                    offered_pps: phase.map_or(0.0, |ph| ph.offered_pps),
                    note: phase
                        .and_then(|ph| ph.not_held.clone())
                        .or_else(|| sr.error.clone()),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(run: usize, rate: u64, label: &str, cpu: f64, p99: f64, held: bool) -> Measured {
        Measured {
            run,
            rate,
            label: label.into(),
            server: Kind::Steer,
            cpu_us: Some(cpu),
            p50_us: Some(p99 / 4.0),
            p99_us: Some(p99),
            held,
            offered_pps: rate as f64,
            note: None,
        }
    }

    #[test]
    fn the_points_cover_every_idle_policy_and_the_kernel_settings() {
        let ps = points();
        let labels: std::collections::HashSet<&str> = ps.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels.len(), ps.len(), "labels are unique");
        for mode in ["sleep", "adaptive", "defer", "busy-poll", "coalesce"] {
            assert!(
                ps.iter()
                    .any(|p| p.steer_args.windows(2).any(|w| w == ["--idle", mode])),
                "{mode}"
            );
        }
        assert!(ps.iter().any(|p| p.server == Kind::Steer
            && p.napi_defer.is_some()
            && p.steer_args.iter().any(|a| a == "--prefer-busy-poll-us")));
        for max in ["50", "200"] {
            assert!(ps
                .iter()
                .any(|p| p.steer_args.windows(2).any(|w| w == ["--spin-max-us", max])));
        }
        let kernel: Vec<&Point> = ps.iter().filter(|p| p.server == Kind::KernelEcho).collect();
        assert_eq!(kernel.len(), 4);
        assert!(kernel
            .iter()
            .any(|p| p.busy_poll_us == 0 && p.napi_defer.is_none() && !p.veth_napi));
        // Busy polling and deferral need veth's NAPI to act at all.
        assert!(kernel.iter().any(|p| p.busy_poll_us == 50 && p.veth_napi));
        assert!(kernel.iter().any(|p| p.napi_defer.is_some() && p.veth_napi));
        assert!(kernel
            .iter()
            .any(|p| p.busy_poll_us == 0 && p.napi_defer.is_none() && p.veth_napi));
        assert!(kernel.iter().all(|p| p.steer_args.is_empty()));
    }

    #[test]
    fn points_are_selected_by_label() {
        assert_eq!(select(points(), &[]).len(), points().len());
        let k: Vec<String> = select(points(), &["kernel".into()])
            .into_iter()
            .map(|p| p.label)
            .collect();
        assert_eq!(k.len(), 4);
        let two = select(points(), &["sleep".into(), "busy-poll 50us".into()]);
        assert_eq!(two.len(), 2);
        assert!(select(points(), &["nothing".into()]).is_empty());
    }

    #[test]
    fn medians_prefer_the_runs_that_held_the_rate() {
        let ps = vec![steer("a", &[]), steer("b", &[])];
        let measured = vec![
            m(1, 20_000, "a", 10.0, 100.0, true),
            m(2, 20_000, "a", 12.0, 300.0, true),
            m(3, 20_000, "a", 50.0, 9000.0, false),
            m(1, 20_000, "b", 5.0, 50.0, false),
            m(1, 50_000, "a", 4.0, 40.0, true),
        ];
        let s = summarize(&measured, &[20_000, 50_000], &ps);
        assert_eq!(s.len(), 4);
        assert_eq!((s[0].cpu_us, s[0].p99_us), (Some(11.0), Some(200.0)));
        assert_eq!((s[0].held_runs, s[0].runs, s[0].held()), (2, 3, false));
        assert_eq!(
            (s[1].cpu_us, s[1].held()),
            (Some(5.0), false),
            "none held: all"
        );
        assert_eq!(
            (s[2].rate, s[2].cpu_us, s[2].held()),
            (50_000, Some(4.0), true)
        );
        assert_eq!((s[3].runs, s[3].cpu_us, s[3].held()), (0, None, false));
    }

    #[test]
    fn the_json_is_a_scatter_steer_plot_reads() {
        let ps = vec![
            steer("steer sleep", &[]),
            kernel("kernel-echo", 0, None, false),
        ];
        let mut k = m(1, 50_000, "kernel-echo", 9.0, 900.0, true);
        k.server = Kind::KernelEcho;
        let measured = vec![m(1, 50_000, "steer sleep", 7.5, 80.0, true), k];
        let sums = summarize(&measured, &[50_000], &ps);
        let j = json(json!({"runs": 1}), &sums, &measured);
        assert_eq!(j["tool"], "steer-bench frontier");
        assert_eq!(j["x_label"], "server CPU us per reply");
        assert_eq!(j["y_label"], "p99 latency, us");
        let pts = j["points"].as_array().unwrap();
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0]["series"], "steer");
        assert_eq!(pts[0]["label"], "steer sleep @50k");
        assert_eq!(pts[0]["x"], 7.5);
        assert_eq!(pts[0]["y"], 80.0);
        assert_eq!(pts[0]["held"], true);
        assert_eq!(pts[1]["series"], "kernel-echo");
        assert_eq!(j["measured"].as_array().unwrap().len(), 2);
        assert_eq!(j["measured"][1]["server"], "kernel-echo");
        let t = table(&sums);
        assert!(t.contains("steer sleep") && t.contains("1/1"), "{t}");
    }
}
