//! Whether a phase held the rate it asked for, whether to try it again,
//! and, when it did not, what was saturated: the generator's CPU, the
//! server's, the generator's tx ring, or its pacing (a thread held up
//! longer than its credit lasts).
//!
//! Invariants: a phase at `max` always holds (there is nothing to hold);
//! a retry is only ever asked for a phase that did not hold, and at most
//! `retries` times; the reason names every measured cause and the busy
//! shares, so a flagged phase always says which side ran out.

use crate::{gen::PhaseResult, report::HOLD};

/// A CPU this busy over the window counts as saturated.
pub const SATURATED: f64 = 0.9;

/// Whether `p` sent at least [`HOLD`] of its asked rate.
pub fn held(p: &PhaseResult) -> bool {
    p.asked_pps
        .is_none_or(|asked| p.offered_pps >= HOLD * asked)
}

/// Whether attempt number `attempt` (from 1) of a phase that gave `p`
/// should be followed by another: it did not hold and fewer than
/// `retries` retries were made.
pub fn retry(p: &PhaseResult, attempt: u32, retries: u32) -> bool {
    !held(p) && attempt <= retries
}

fn busy(p: &PhaseResult, cpu: usize) -> Option<f64> {
    p.cpu.per_cpu_busy.get(cpu).copied()
}

/// Why `p` did not hold its rate, from what the generator measured
/// (`server_cpus`: the server's CPUs).
pub fn why_not_held(p: &PhaseResult, server_cpus: &[usize]) -> String {
    let asked = p.asked_pps.unwrap_or(0.0);
    let mut causes = Vec::new();
    let mut shares = Vec::new();
    let gen = p.generator_cpu as usize;
    if let Some(b) = busy(p, gen) {
        if b >= SATURATED {
            causes.push(format!(
                "generator CPU {gen} saturated ({:.0}% busy)",
                b * 100.0
            ));
        } else {
            shares.push(format!("generator CPU {gen} {:.0}% busy", b * 100.0));
        }
    }
    for &c in server_cpus.iter().filter(|&&c| c != gen) {
        if let Some(b) = busy(p, c) {
            if b >= SATURATED {
                causes.push(format!("server CPU {c} saturated ({:.0}% busy)", b * 100.0));
            } else {
                shares.push(format!("server CPU {c} {:.0}% busy", b * 100.0));
            }
        }
    }
    if p.tx_stalls > 0 || p.unsent > 0 {
        causes.push(format!(
            "tx ring full or no free frame {} times ({} requests never sent)",
            p.tx_stalls, p.unsent
        ));
    }
    if p.credit_dropped > 0 || p.late_wakes > 0 {
        causes.push(format!(
            "pacing stalls: {} packets of credit lost, {} wake-ups over 1 ms late",
            p.credit_dropped, p.late_wakes
        ));
    }
    if causes.is_empty() {
        causes.push("no saturation measured".into());
    }
    causes.extend(shares);
    format!(
        "offered {:.0} of {:.0}/s ({:.0}%) in {} attempt(s): {}",
        p.offered_pps,
        asked,
        100.0 * p.offered_pps / asked.max(1.0),
        p.attempts,
        causes.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(asked: Option<f64>, offered: f64, busy: [f64; 2]) -> PhaseResult {
        PhaseResult {
            attempts: 3,
            ..crate::gen::test_phase(asked, offered, &busy)
        }
    }

    #[test]
    fn a_rate_is_held_at_95_percent_and_max_always_holds() {
        assert!(held(&phase(Some(50_000.0), 47_500.0, [0.5, 0.5])));
        assert!(!held(&phase(Some(50_000.0), 47_400.0, [0.5, 0.5])));
        assert!(held(&phase(None, 10.0, [1.0, 1.0])));
    }

    #[test]
    fn a_phase_not_held_is_retried_at_most_retries_times() {
        let bad = phase(Some(50_000.0), 30_000.0, [0.5, 0.5]);
        let good = phase(Some(50_000.0), 50_000.0, [0.5, 0.5]);
        assert!(retry(&bad, 1, 2));
        assert!(retry(&bad, 2, 2));
        assert!(!retry(&bad, 3, 2), "three attempts: two retries");
        assert!(!retry(&bad, 1, 0), "no retries asked for");
        assert!(!retry(&good, 1, 2));
        assert!(!retry(&phase(None, 1.0, [0.0, 0.0]), 1, 2));
    }

    #[test]
    fn the_reason_names_what_was_saturated() {
        let mut p = phase(Some(50_000.0), 40_000.0, [0.97, 0.30]);
        let why = why_not_held(&p, &[1]);
        assert!(why.starts_with("offered 40000 of 50000/s (80%) in 3 attempt(s): generator CPU 0 saturated (97% busy)"), "{why}");
        assert!(why.contains("server CPU 1 30% busy"), "{why}");
        p.cpu.per_cpu_busy = vec![0.4, 0.95];
        (p.tx_stalls, p.unsent, p.credit_dropped, p.late_wakes) = (7, 3, 500, 2);
        let why = why_not_held(&p, &[1]);
        assert!(why.contains("server CPU 1 saturated (95% busy)"), "{why}");
        assert!(
            why.contains("tx ring full or no free frame 7 times (3 requests never sent)"),
            "{why}"
        );
        assert!(
            why.contains("pacing stalls: 500 packets of credit lost, 2 wake-ups over 1 ms late"),
            "{why}"
        );
        assert!(why.contains("generator CPU 0 40% busy"), "{why}");
        p.cpu.per_cpu_busy = vec![0.4, 0.5];
        (p.tx_stalls, p.unsent, p.credit_dropped, p.late_wakes) = (0, 0, 0, 0);
        assert!(why_not_held(&p, &[1]).contains("no saturation measured"));
    }
}
