//! `steer rfs --metrics`: the RFS program's counters in the Prometheus text
//! exposition format, built per scrape from the program's maps (the same
//! reads as the live row: one per counter, per CPU where it is per CPU)
//! with the `prometheus` crate, never by hand. Every family is
//! `steer_rfs_*`; counters end in `_total`, the landing count has one
//! series per CPU (`cpu` label). Owns no state: a scrape reads the maps
//! anew, and a program that is gone (steering stopped) fails the scrape.

use std::sync::Weak;

use prometheus::{Encoder, IntCounter, IntCounterVec, Opts, Registry, TextEncoder};
use steer_kernel::RfsStats;
use steer_xdp::rfs::RfsProgram;

/// Counters of `RfsStats`: name, help, value.
type Counter = (&'static str, &'static str, fn(&RfsStats) -> u64);

const COUNTERS: &[Counter] = &[
    (
        "steer_rfs_redirected_total",
        "Frames the XDP program redirected into a CPU's cpumap queue.",
        |s| s.redirected,
    ),
    (
        "steer_rfs_passed_total",
        "Frames of ports steer does not steer, and non-IP frames: the kernel path.",
        |s| s.passed,
    ),
    (
        "steer_rfs_untracked_total",
        "Frames of steered ports whose flow has no CPU yet: the kernel path.",
        |s| s.untracked,
    ),
    (
        "steer_rfs_moves_total",
        "Flows placed on a CPU or moved to another.",
        |s| s.moves,
    ),
    (
        "steer_rfs_held_back_total",
        "Frames kept on a flow's old CPU while its move waited for the old path to drain.",
        |s| s.held_back,
    ),
    (
        "steer_rfs_forced_total",
        "UDP moves forced after 100 ms of quiet or 1 s held (frames taken as lost).",
        |s| s.forced,
    ),
    (
        "steer_rfs_delivered_total",
        "UDP datagrams of tracked flows counted as they reached their socket.",
        |s| s.delivered,
    ),
    (
        "steer_rfs_queue_drops_total",
        "Frames a full cpumap queue dropped (its CPU fell behind).",
        |s| s.queue_drops,
    ),
    (
        "steer_rfs_redirect_errors_total",
        "Frames that failed to reach a cpumap queue.",
        |s| s.redirect_errors,
    ),
    (
        "steer_rfs_csum_completed_total",
        "Partial checksums completed before a redirect.",
        |s| s.csum_completed,
    ),
    (
        "steer_rfs_recorded_reads_total",
        "Reads the in-kernel recorders saw: TCP reads, UDP datagrams read with their sender.",
        |s| s.recorded,
    ),
    (
        "steer_rfs_recorder_new_flows_total",
        "Flows the in-kernel recorders placed for the first time.",
        |s| s.recorder_new_flows,
    ),
    (
        "steer_rfs_recorder_updates_total",
        "Desired CPUs the in-kernel recorders wrote (placements and moves): the costly updates.",
        |s| s.recorder_updates,
    ),
    (
        "steer_rfs_recorder_suppressed_total",
        "Changes of reading CPU the LLC rule left unwritten.",
        |s| s.recorder_suppressed,
    ),
];

/// The families of one scrape of `stats` and `landed` (per CPU, index =
/// CPU), encoded.
pub fn encode(stats: &RfsStats, landed: &[u64]) -> prometheus::Result<String> {
    let registry = Registry::new();
    for &(name, help, value) in COUNTERS {
        let c = IntCounter::new(name, help)?;
        registry.register(Box::new(c.clone()))?;
        c.inc_by(value(stats));
    }
    let per_cpu = IntCounterVec::new(
        Opts::new(
            "steer_rfs_landed_total",
            "Frames this CPU's cpumap program handed to its stack: where steered flows land.",
        ),
        &["cpu"],
    )?;
    registry.register(Box::new(per_cpu.clone()))?;
    for (cpu, &n) in landed.iter().enumerate() {
        per_cpu.with_label_values(&[&cpu.to_string()]).inc_by(n);
    }
    let mut out = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut out)?;
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

/// One scrape of `program`, while it is attached.
pub fn scrape(program: &Weak<RfsProgram>) -> prometheus::Result<String> {
    let program = program
        .upgrade()
        .ok_or_else(|| prometheus::Error::Msg("steer rfs is stopping".into()))?;
    let read = |e: steer_xdp::XdpError| prometheus::Error::Msg(e.to_string());
    encode(
        &program.stats().map_err(read)?,
        &program.landed_per_cpu().map_err(read)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_a_total_with_help_and_landed_is_per_cpu() {
        let stats = RfsStats {
            redirected: 7,
            recorder_updates: 3,
            ..Default::default()
        };
        let text = encode(&stats, &[5, 9]).unwrap();
        assert!(
            text.contains(
                "# TYPE steer_rfs_redirected_total counter\nsteer_rfs_redirected_total 7\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("steer_rfs_recorder_updates_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("steer_rfs_landed_total{cpu=\"0\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("steer_rfs_landed_total{cpu=\"1\"} 9\n"),
            "{text}"
        );
        for &(name, _, _) in COUNTERS {
            assert!(name.ends_with("_total"), "{name}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        }
    }

    #[test]
    fn a_program_that_is_gone_fails_the_scrape() {
        let gone: Weak<RfsProgram> = Weak::new();
        let e = scrape(&gone).unwrap_err().to_string();
        assert!(e.contains("stopping"), "{e}");
    }
}
