//! What each phase of the demo showed, from two snapshots of the engine's
//! counters ([`LiveStats`]) and the clients' tallies: [`PhaseSummary`], its
//! table and JSON, and [`check`], what `--check` requires of a run.
//!
//! Invariant: every number is a difference between the phase's end and
//! start (counters only grow), so phases never mix.

use std::fmt::Write as _;

use serde::Serialize;
use steer_engine::observe::LiveStats;

use super::clients::Tally;

/// One phase: a policy held for a while, consumers moved on a schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PhaseSummary {
    /// The update policy during the phase (`always`, `llc`).
    pub policy: String,
    /// Seconds it lasted.
    pub seconds: f64,
    /// Times the demo moved a consumer thread to another CPU.
    pub consumer_moves: u64,
    /// Frames the dispatchers received.
    pub rx: u64,
    /// Packets handled on the CPU that received them.
    pub fast_path: u64,
    /// Packets handed to another CPU's worker (= steered in, summed).
    pub steered: u64,
    /// Steered out, per worker CPU, in CPU order.
    pub steered_out_per_cpu: Vec<(usize, u64)>,
    /// Steered in, per worker CPU.
    pub steered_in_per_cpu: Vec<(usize, u64)>,
    /// Flow moves that called the steering hook (the costly updates).
    pub steering_updates: u64,
    /// Desired-table writes because a consumer changed CPU (`always`) or
    /// crossed an LLC (`llc`).
    pub moves_written: u64,
    /// Consumer CPU changes the `llc` rule kept (same LLC).
    pub suppressed: u64,
    /// Datagrams the clients sent and got back, and replies out of order.
    pub sent: u64,
    /// Replies received.
    pub answered: u64,
    /// Replies that came back before an earlier one of their flow.
    pub reordered: u64,
}

impl PhaseSummary {
    /// The phase between `start` and `end`.
    pub fn between(
        policy: &str,
        start: &LiveStats,
        end: &LiveStats,
        clients: (Tally, Tally),
        consumer_moves: u64,
    ) -> Self {
        let (s, e) = (start.total(), end.total());
        let per_cpu = |f: fn(&steer_engine::observe::CpuCounters) -> u64| {
            end.per_cpu
                .iter()
                .map(|r| {
                    let before = start.per_cpu.iter().find(|b| b.cpu == r.cpu).map_or(0, f);
                    (r.cpu, f(r) - before)
                })
                .collect::<Vec<_>>()
        };
        let written = |l: &LiveStats| {
            ["changed", "cross_llc", "forced_affinity", "forced_offline"]
                .iter()
                .map(|r| l.desired.updates.get(*r).copied().unwrap_or(0))
                .sum::<u64>()
        };
        let (c0, c1) = clients;
        Self {
            policy: policy.into(),
            seconds: end.uptime_s - start.uptime_s,
            consumer_moves,
            rx: e.core.rx - s.core.rx,
            fast_path: e.core.fast_path - s.core.fast_path,
            steered: e.core.steered_in - s.core.steered_in,
            steered_out_per_cpu: per_cpu(|r| r.core.steered_out),
            steered_in_per_cpu: per_cpu(|r| r.core.steered_in),
            steering_updates: end.steering_updates() - start.steering_updates(),
            moves_written: written(end) - written(start),
            suppressed: end.desired.suppressed - start.desired.suppressed,
            sent: c1.sent - c0.sent,
            answered: c1.answered - c0.answered,
            reordered: c1.reordered - c0.reordered,
        }
    }
}

/// The phases as a table, one row each.
pub fn table(phases: &[PhaseSummary]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<7} {:>5} {:>9} {:>9} {:>9} {:>16} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "policy",
        "secs",
        "rx",
        "fast",
        "steered",
        "out per cpu",
        "consumer",
        "written",
        "updates",
        "suppressed",
        "replies",
        "reordered"
    );
    let _ = writeln!(
        t,
        "{:<7} {:>5} {:>9} {:>9} {:>9} {:>16} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "", "", "", "", "", "", "moves", "moves", "", "", "", ""
    );
    for p in phases {
        let out: Vec<String> = p
            .steered_out_per_cpu
            .iter()
            .map(|(c, n)| format!("{c}:{n}"))
            .collect();
        let _ = writeln!(
            t,
            "{:<7} {:>5.1} {:>9} {:>9} {:>9} {:>16} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
            p.policy,
            p.seconds,
            p.rx,
            p.fast_path,
            p.steered,
            out.join(" "),
            p.consumer_moves,
            p.moves_written,
            p.steering_updates,
            p.suppressed,
            format!("{}/{}", p.answered, p.sent),
            p.reordered
        );
    }
    t
}

/// What `--check` requires: under `always`, flows consumed on another CPU
/// than their rx queue's (steered > 0) and moved when their consumer moved
/// (steering updates > 0); under `llc` with at least 2 LLCs, moves kept in
/// place (suppressed > 0) and fewer updates than `always` made. The error
/// names the first number that falls short.
pub fn check(phases: &[PhaseSummary], llcs: usize) -> Result<(), String> {
    let find = |policy: &str| {
        phases
            .iter()
            .find(|p| p.policy == policy)
            .ok_or_else(|| format!("no {policy} phase"))
    };
    let always = find("always")?;
    let llc = find("llc")?;
    if always.steered == 0 {
        return Err("no packet was steered to another CPU under always".into());
    }
    if always.steering_updates == 0 {
        return Err("no flow moved when its consumer moved under always".into());
    }
    if llcs < 2 {
        return Err(format!(
            "the topology has {llcs} LLC(s); the check needs 2 or more"
        ));
    }
    if llc.suppressed == 0 {
        return Err("the llc rule suppressed no move".into());
    }
    if llc.steering_updates >= always.steering_updates {
        return Err(format!(
            "llc made {} steering updates, not fewer than always's {}",
            llc.steering_updates, always.steering_updates
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer_engine::observe::CpuCounters;

    fn live(uptime: f64, rows: &[(usize, u64, u64, u64)], changed: u64, supp: u64) -> LiveStats {
        let mut l = LiveStats::empty("veth0");
        l.uptime_s = uptime;
        for &(cpu, rx, out, hook) in rows {
            let mut r = CpuCounters {
                cpu,
                ..Default::default()
            };
            r.core.rx = rx;
            r.core.steered_out = out;
            r.core.steered_in = out;
            r.core.hook_calls = hook;
            l.per_cpu.push(r);
        }
        l.desired.updates.insert("changed".into(), changed);
        l.desired.updates.insert("new_or_other_flow".into(), 99);
        l.desired.suppressed = supp;
        l
    }

    fn tally(sent: u64, answered: u64) -> Tally {
        Tally {
            sent,
            answered,
            reordered: 0,
        }
    }

    #[test]
    fn a_phase_is_the_difference_of_its_ends() {
        let a = live(1.0, &[(0, 100, 10, 1), (1, 50, 5, 0)], 3, 7);
        let b = live(4.0, &[(0, 300, 60, 4), (1, 150, 25, 2)], 10, 7);
        let p = PhaseSummary::between("always", &a, &b, (tally(10, 9), tally(410, 405)), 6);
        assert_eq!(p.seconds, 3.0);
        assert_eq!(p.rx, 300);
        assert_eq!(p.steered_out_per_cpu, vec![(0, 50), (1, 20)]);
        assert_eq!(p.steered, 70);
        assert_eq!(p.steering_updates, 5);
        assert_eq!(p.moves_written, 7);
        assert_eq!(p.suppressed, 0);
        assert_eq!((p.sent, p.answered), (400, 396));
        assert!(table(&[p]).contains("0:50 1:20"));
    }

    #[test]
    fn the_check_names_what_is_missing() {
        let always = PhaseSummary {
            policy: "always".into(),
            steered: 10,
            steering_updates: 8,
            ..Default::default()
        };
        let llc = PhaseSummary {
            policy: "llc".into(),
            steered: 10,
            steering_updates: 0,
            suppressed: 30,
            ..Default::default()
        };
        assert_eq!(check(&[always.clone(), llc.clone()], 2), Ok(()));
        assert!(check(&[always.clone(), llc.clone()], 1)
            .unwrap_err()
            .contains("1 LLC"));
        let quiet = PhaseSummary {
            suppressed: 0,
            ..llc.clone()
        };
        assert!(check(&[always.clone(), quiet], 2)
            .unwrap_err()
            .contains("suppressed no move"));
        let unsteered = PhaseSummary {
            steered: 0,
            ..always.clone()
        };
        assert!(check(&[unsteered, llc.clone()], 2)
            .unwrap_err()
            .contains("steered"));
        let still = PhaseSummary {
            steering_updates: 0,
            ..always
        };
        assert!(check(&[still, llc], 2).unwrap_err().contains("moved"));
    }
}
