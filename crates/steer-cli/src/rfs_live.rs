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
    /// The program's and the recorders' counters, summed over CPUs.
    pub counters: RfsCounters,
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

/// The counters of [`RfsStats`], named for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RfsCounters {
    /// Reads the in-kernel recorders saw.
    pub reads: u64,
    /// Flows the recorders placed for the first time.
    pub new_flows: u64,
    /// Desired CPUs the recorders wrote (placements and moves).
    pub updates: u64,
    /// Changes of reading CPU the LLC rule left unwritten.
    pub suppressed: u64,
    /// Frames redirected into a cpumap queue.
    pub redirected: u64,
    /// Frames of ports not steered, and non-IP frames.
    pub passed: u64,
    /// Frames of steered ports whose flow has no CPU yet.
    pub untracked: u64,
    /// Flows placed on a CPU or moved.
    pub moves: u64,
    /// Frames kept on a flow's old CPU while its move waited for the old
    /// path to drain (order waits).
    pub held_back: u64,
    /// UDP moves forced after the maximum hold.
    pub forced: u64,
    /// Frames whose CPU had no cpumap entry.
    pub redirect_failed: u64,
    /// Frames the cpumap programs handed to a CPU's stack.
    pub landed: u64,
    /// UDP datagrams of tracked flows that reached their socket.
    pub delivered: u64,
    /// Frames of flows with a CPU but no state.
    pub no_state: u64,
    /// Frames a full cpumap queue dropped.
    pub queue_drops: u64,
    /// Frames that failed to reach a cpumap queue.
    pub redirect_errors: u64,
    /// Partial checksums completed before a redirect.
    pub csum_completed: u64,
    /// Frames with a partial checksum too long to complete (passed).
    pub csum_passed: u64,
}

impl From<RfsStats> for RfsCounters {
    fn from(s: RfsStats) -> Self {
        Self {
            reads: s.recorded,
            new_flows: s.recorder_new_flows,
            updates: s.recorder_updates,
            suppressed: s.recorder_suppressed,
            redirected: s.redirected,
            passed: s.passed,
            untracked: s.untracked,
            moves: s.moves,
            held_back: s.held_back,
            forced: s.forced,
            redirect_failed: s.redirect_failed,
            landed: s.landed,
            delivered: s.delivered,
            no_state: s.no_state,
            queue_drops: s.queue_drops,
            redirect_errors: s.redirect_errors,
            csum_completed: s.csum_completed,
            csum_passed: s.csum_passed,
        }
    }
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
            counters: stats.into(),
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
