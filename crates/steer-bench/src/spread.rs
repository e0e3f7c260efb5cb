//! Whether the runs agree: for each server, the spread (largest over
//! smallest) of each headline number across the interleaved runs:
//! capacity at `max`, CPU us per reply at each fixed rate, p99 at the
//! latency rate. A spread over [`LIMIT`](crate::spread::LIMIT) is flagged: the median of such
//! runs says less than it seems.
//!
//! Invariants: only positive, finite values count; a number needs two
//! runs to have a spread; the line lists servers and numbers in report
//! order.

use std::fmt::Write;

use crate::{
    gen::PhaseResult,
    report::{phase_name, ServerRun},
    servers::Kind,
};

/// Spread above which runs disagree (20%).
pub const LIMIT: f64 = 1.2;

/// Largest over smallest of the positive finite `values`; `None` with
/// fewer than two.
pub fn spread(values: &[f64]) -> Option<f64> {
    let v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.len() < 2 {
        return None;
    }
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    Some(max / min)
}

/// One headline number's spread: (server, number, spread).
pub type Spread = (String, String, f64);

/// The spreads of every server in `kinds` over `runs` (`rates`: the fixed
/// rates, the first the latency rate).
pub fn spreads(kinds: &[Kind], runs: &[ServerRun], rates: &[u64]) -> Vec<Spread> {
    let mut out = Vec::new();
    for &k in kinds {
        let mine: Vec<&ServerRun> = runs.iter().filter(|r| r.server == k).collect();
        let of = |name: &str, f: &dyn Fn(&PhaseResult) -> Option<f64>| -> Vec<f64> {
            mine.iter()
                .filter_map(|r| r.phases.iter().find(|(n, _)| n == name))
                .filter_map(|(_, p)| f(p))
                .collect()
        };
        let mut push = |what: String, v: Vec<f64>| {
            if let Some(s) = spread(&v) {
                out.push((k.name().to_owned(), what, s));
            }
        };
        push("capacity".into(), of("max", &|p| Some(p.answered_pps)));
        for (i, &rate) in rates.iter().enumerate() {
            let name = phase_name(Some(rate));
            push(format!("us@{name}"), of(&name, &|p| p.cpu_us_per_reply));
            if i == 0 {
                push(
                    format!("p99@{name}"),
                    of(&name, &|p| p.latency.map(|l| l.p99_us)),
                );
            }
        }
    }
    out
}

/// "runs agree: ..." or "RUNS DISAGREE: ...", each number's spread, those
/// over [`LIMIT`] marked `!`; `None` with nothing to compare.
pub fn line(spreads: &[Spread]) -> Option<String> {
    if spreads.is_empty() {
        return None;
    }
    let bad = spreads.iter().filter(|s| s.2 > LIMIT).count();
    let mut t = if bad == 0 {
        "runs agree (every headline number within 20% across runs):".to_owned()
    } else {
        format!("RUNS DISAGREE ({bad} headline number(s) spread over 20%, max/min across runs):")
    };
    for (server, what, s) in spreads {
        let mark = if *s > LIMIT { "!" } else { "" };
        let _ = write!(t, " {server} {what} {s:.2}x{mark};");
    }
    t.pop();
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_max_over_min_of_two_or_more() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[5.0]), None);
        assert_eq!(spread(&[2.0, 3.0, 2.5]), Some(1.5));
        assert_eq!(spread(&[0.0, 4.0, f64::NAN, 4.0]), Some(1.0));
    }

    #[test]
    fn spreads_of_capacity_cost_and_p99_per_server() {
        let phase = |answered: f64, us: f64, p99: f64| PhaseResult {
            cpu_us_per_reply: Some(us),
            latency: Some(crate::gen::Latency {
                count: 1,
                p50_us: p99 / 2.0,
                p99_us: p99,
                p999_us: p99,
                max_us: p99,
            }),
            ..crate::gen::test_phase(Some(50_000.0), answered, &[0.5, 0.5])
        };
        let run = |n, kind, cap: f64, us, p99| ServerRun {
            run: n,
            server: kind,
            error: None,
            phases: vec![
                ("max".into(), phase(cap, 1.0, 1.0)),
                ("50000".into(), phase(50_000.0, us, p99)),
                ("200000".into(), phase(200_000.0, us / 2.0, p99)),
            ],
            ran_on: String::new(),
            last_words: String::new(),
            stats: None,
        };
        let runs = vec![
            run(1, Kind::Steer, 100.0, 8.0, 100.0),
            run(1, Kind::KernelEcho, 10.0, 10.0, 50.0),
            run(2, Kind::Steer, 110.0, 8.0, 300.0),
        ];
        let s = spreads(&[Kind::Steer, Kind::KernelEcho], &runs, &[50_000, 200_000]);
        let names: Vec<String> = s.iter().map(|(k, w, _)| format!("{k} {w}")).collect();
        assert_eq!(
            names,
            [
                "steer capacity",
                "steer us@50000",
                "steer p99@50000",
                "steer us@200000"
            ],
            "one run of kernel-echo has no spread"
        );
        assert!((s[0].2 - 1.1).abs() < 1e-9);
        assert_eq!((s[1].2, s[2].2), (1.0, 3.0));
        assert!(line(&s).unwrap().starts_with("RUNS DISAGREE (1 headline"));
    }

    #[test]
    fn the_line_flags_numbers_over_20_percent() {
        assert_eq!(line(&[]), None);
        let ok = vec![("steer".to_owned(), "capacity".to_owned(), 1.1)];
        let l = line(&ok).unwrap();
        assert!(
            l.starts_with("runs agree") && l.ends_with("steer capacity 1.10x"),
            "{l}"
        );
        let bad = vec![
            ("steer".to_owned(), "capacity".to_owned(), 1.1),
            ("kernel-echo".to_owned(), "p99@50k".to_owned(), 2.5),
        ];
        let l = line(&bad).unwrap();
        assert!(l.starts_with("RUNS DISAGREE (1 headline"), "{l}");
        assert!(l.contains("kernel-echo p99@50k 2.50x!"), "{l}");
    }
}
