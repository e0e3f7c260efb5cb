//! What the commands that steer kernel sockets (`tcp-echo`, `rfs`) take
//! from the command line to build steer-kernel's steering, and the
//! per-CPU counter deltas their live rows print.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use steer_core::cpu::CpuSet;
use steer_core::policy::Policy;
use steer_kernel::{KernelSteering, KernelSteeringBuilder, XdpMode};

use crate::args::AttachMode;

/// The steering flags shared by `tcp-echo` and `rfs`.
#[derive(Debug, Args)]
pub struct KernelSteeringArgs {
    /// Read options from this TOML file: each key is a long option of this
    /// command (`workers = 2`, `port = [7000, 7001]`, `no-table = true`);
    /// options on the command line override the file's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Update policy: `llc` (write a new CPU only across LLCs, or when the
    /// old CPU is gone) or `always`.
    #[arg(long, default_value = "llc")]
    pub policy: Policy,
    /// Use this hwloc synthetic topology for the LLC rule instead of the
    /// machine's (e.g. `pack:1 l3:2 core:1 pu:1`: two CPUs in two LLCs).
    #[arg(long)]
    pub topology: Option<String>,
    /// CPUs connections may be steered to, kernel list format (default: all
    /// this process may run on).
    #[arg(long, value_parser = crate::args::cpu_list)]
    pub cpus: Option<CpuSet>,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: AttachMode,
    /// Replace a steer RFS program left attached, also by this process (a
    /// crashed run's is replaced anyway: no steer process holds the
    /// interface's lock; a live owner is never replaced).
    #[arg(long)]
    pub replace_stale: bool,
    /// Keep every capability after set-up (by default all go but
    /// CAP_NET_ADMIN, which detaches the program at stop).
    #[arg(long)]
    pub keep_capabilities: bool,
    /// `--user`, `--group`, `--seccomp`.
    #[command(flatten)]
    pub privileges: crate::least_privilege::PrivilegeArgs,
    /// `--stats-json`, `--duration`, `--no-table`.
    #[command(flatten)]
    pub run: crate::args::RunArgs,
}

impl KernelSteeringArgs {
    /// A builder on `interface` with these flags; `fresh`: the interface's
    /// owner lock was free, so what a dead run left attached is replaced.
    pub fn builder(&self, interface: &str, fresh: bool) -> anyhow::Result<KernelSteeringBuilder> {
        let mut b = KernelSteering::builder(interface)
            .policy(self.policy)
            .replace_stale(self.replace_stale || fresh)
            .drop_privileges(!self.keep_capabilities)
            .xdp_mode(match self.xdp_mode {
                AttachMode::Auto => XdpMode::Auto,
                AttachMode::Native => XdpMode::Native,
                AttachMode::Generic => XdpMode::Generic,
            });
        if let Some(spec) = &self.topology {
            b = b.topology(steer_topology::Topology::synthetic(spec)?.layout());
        }
        if let Some(cpus) = self.cpus {
            b = b.cpus(cpus);
        }
        // Looked up now: an unknown user fails before anything is attached.
        if let Some(user) = self.privileges.run_as()? {
            b = b.run_as(user);
        }
        Ok(b)
    }

    /// Runs until `stop` is set or `--duration` has passed since `started`,
    /// calling `each_second` once a second (for the live row).
    pub fn run_live(&self, stop: &AtomicBool, started: Instant, mut each_second: impl FnMut()) {
        let deadline = self.run.deadline(started);
        let mut next = started + Duration::from_secs(1);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            if now >= next {
                next += Duration::from_secs(1);
                each_second();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The topology's name for reports.
    pub fn topology_name(&self) -> String {
        self.topology.clone().unwrap_or_else(|| "live".into())
    }
}

/// Element-wise `a - b` (a missing `b` counts 0; never below 0).
pub fn delta(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter()
        .zip(b.iter().chain(std::iter::repeat(&0)))
        .map(|(x, y)| x.saturating_sub(*y))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_is_element_wise_and_never_negative() {
        assert_eq!(delta(&[5, 3, 7], &[2, 4]), vec![3, 0, 7]);
    }
}
