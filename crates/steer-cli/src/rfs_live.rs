//! The snapshot a running `steer rfs` answers on its stats socket (kind
//! `rfs`; the observer adds the `kind` field), built from the RFS
//! program's maps at each request, and read back by `steer stats` and
//! `steer top` ([`RfsLive::from_json`]).
//!
//! Invariants: a snapshot reads the program's counters (one map lookup a
//! counter, per CPU where it is per CPU) and walks its tracked flows once;
//! nothing is kept between requests, and a program that is gone (`steer
//! rfs` stopping) is an error, never a panic. Counters are totals since
//! the program was attached; readers take rates between two snapshots of
//! the same process (same pid, growing uptime).

use std::sync::Weak;
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use steer_core::cpu::CpuSet;
use steer_kernel::RfsStats;
use steer_xdp::rfs::RfsProgram;

/// The `kind` of a `steer rfs` snapshot.
pub const KIND: &str = "rfs";

/// The version of [`RfsLive`]'s format; a reader refuses another.
pub const FORMAT_VERSION: u32 = 1;

/// A running `steer rfs`, as its stats socket answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RfsLive {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// The interface the program is attached to.
    pub interface: String,
    /// The process.
    pub pid: u32,
    /// Seconds since it started serving.
    pub uptime_s: f64,
    /// TCP ports steered.
    pub tcp_ports: Vec<u16>,
    /// UDP ports steered.
    pub udp_ports: Vec<u16>,
    /// The recorder's update policy (`llc` or `always`).
    pub policy: String,
    /// The topology the LLC rule uses (`live`, or a synthetic one).
    pub topology: String,
    /// The XDP attach mode in use.
    pub xdp_mode: String,
    /// The CPUs flows may be steered to (kernel list format).
    pub cpus: String,
    /// Flows the program tracks now.
    pub flows_tracked: u64,
    /// The program's and the recorders' counters, summed over CPUs (their
    /// names on the wire are [`RfsStats`]' serde form).
    pub counters: RfsStats,
    /// Per CPU: the steered CPUs and any other with a count.
    pub per_cpu: Vec<RfsCpu>,
}

/// One CPU's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RfsCpu {
    /// The CPU.
    pub cpu: usize,
    /// Frames its cpumap program handed to its stack: where steered flows
    /// land.
    pub landed: u64,
    /// Frames the XDP program redirected while running on it (the
    /// receiving CPU).
    pub redirected: u64,
}

/// What a snapshot says besides the program's maps: fixed at start.
#[derive(Debug, Clone)]
pub struct RfsIdentity {
    pub interface: String,
    pub tcp_ports: Vec<u16>,
    pub udp_ports: Vec<u16>,
    pub policy: String,
    pub topology: String,
    pub xdp_mode: String,
    pub cpus: CpuSet,
    pub started: Instant,
}

impl RfsIdentity {
    /// The snapshot now of `program`, while it is attached.
    pub fn snapshot(&self, program: &Weak<RfsProgram>) -> Result<RfsLive, String> {
        let program = program
            .upgrade()
            .ok_or_else(|| "steer rfs is stopping".to_string())?;
        let read = |e: steer_xdp::XdpError| e.to_string();
        let stats = program.stats().map_err(read)?;
        let landed = program.landed_per_cpu().map_err(read)?;
        let redirected = program.redirected_per_cpu().map_err(read)?;
        let tracked = program.tracked().map_err(read)?.len() as u64;
        Ok(RfsLive {
            version: FORMAT_VERSION,
            interface: self.interface.clone(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            tcp_ports: self.tcp_ports.clone(),
            udp_ports: self.udp_ports.clone(),
            policy: self.policy.clone(),
            topology: self.topology.clone(),
            xdp_mode: self.xdp_mode.clone(),
            cpus: self.cpus.to_string(),
            flows_tracked: tracked,
            counters: stats,
            per_cpu: per_cpu(self.cpus, &landed, &redirected),
        })
    }
}

/// The rows of the CPUs in `cpus` and of any other with a count (index =
/// CPU in `landed` and `redirected`).
fn per_cpu(cpus: CpuSet, landed: &[u64], redirected: &[u64]) -> Vec<RfsCpu> {
    let n = landed.len().max(redirected.len());
    (0..n)
        .map(|cpu| RfsCpu {
            cpu,
            landed: landed.get(cpu).copied().unwrap_or(0),
            redirected: redirected.get(cpu).copied().unwrap_or(0),
        })
        .filter(|r| cpus.contains(r.cpu) || r.landed > 0 || r.redirected > 0)
        .collect()
}

impl RfsLive {
    /// A snapshot as its stats socket sent it, its version checked.
    pub fn from_json(v: serde_json::Value) -> anyhow::Result<Self> {
        let version = v.get("version").and_then(serde_json::Value::as_u64);
        if version != Some(u64::from(FORMAT_VERSION)) {
            anyhow::bail!(
                "steer rfs speaks stats format {version:?}; this steer reads version \
                 {FORMAT_VERSION}: use the steer that started it"
            );
        }
        serde_json::from_value(v).context("unexpected steer rfs stats")
    }

    /// The counters summed over the per-CPU rows.
    pub fn total(&self) -> RfsCpu {
        self.per_cpu.iter().fold(RfsCpu::default(), |a, r| RfsCpu {
            cpu: 0,
            landed: a.landed + r.landed,
            redirected: a.redirected + r.redirected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_steered_cpus_and_any_with_a_count() {
        let rows = per_cpu(CpuSet::first(2), &[0, 5, 0, 7], &[1, 0, 0, 0]);
        let cpus: Vec<usize> = rows.iter().map(|r| r.cpu).collect();
        assert_eq!(cpus, [0, 1, 3]);
        assert_eq!(rows[0].redirected, 1);
        assert_eq!(rows[2].landed, 7);
    }

    #[test]
    fn a_snapshot_reads_back_and_another_version_is_refused() {
        let live = RfsLive {
            version: FORMAT_VERSION,
            interface: "veth0".into(),
            per_cpu: vec![RfsCpu {
                cpu: 1,
                landed: 3,
                redirected: 4,
            }],
            ..Default::default()
        };
        let mut v = serde_json::to_value(&live).unwrap();
        v["kind"] = KIND.into();
        assert_eq!(RfsLive::from_json(v.clone()).unwrap(), live);
        v["version"] = 9.into();
        let e = RfsLive::from_json(v).unwrap_err().to_string();
        assert!(e.contains("format Some(9)"), "{e}");
    }

    #[test]
    fn the_counters_keep_their_names_on_the_wire() {
        let live = RfsLive {
            counters: RfsStats {
                recorded: 1,
                recorder_new_flows: 2,
                recorder_updates: 3,
                recorder_suppressed: 4,
                csum_passed: 5,
                ..Default::default()
            },
            ..Default::default()
        };
        let v = serde_json::to_value(&live).unwrap();
        assert_eq!(
            v["counters"].to_string(),
            "{\"reads\":1,\"new_flows\":2,\"updates\":3,\"suppressed\":4,\
             \"redirected\":0,\"passed\":0,\"untracked\":0,\"moves\":0,\
             \"held_back\":0,\"forced\":0,\"redirect_failed\":0,\"landed\":0,\
             \"delivered\":0,\"no_state\":0,\"queue_drops\":0,\
             \"redirect_errors\":0,\"csum_completed\":0,\"csum_passed\":5}"
        );
        // A snapshot without some counters (an older writer) reads them as 0.
        let old = serde_json::json!({"version": FORMAT_VERSION, "counters": {"reads": 7}});
        let read = RfsLive::from_json(old).unwrap();
        assert_eq!(read.counters.recorded, 7);
        assert_eq!(read.counters.csum_passed, 0);
    }

    #[test]
    fn a_program_that_is_gone_is_an_error() {
        let id = RfsIdentity {
            interface: "veth0".into(),
            tcp_ports: vec![80],
            udp_ports: vec![],
            policy: "llc".into(),
            topology: "live".into(),
            xdp_mode: "generic".into(),
            cpus: CpuSet::first(1),
            started: Instant::now(),
        };
        let e = id.snapshot(&Weak::new()).unwrap_err();
        assert!(e.contains("stopping"), "{e}");
    }
}
