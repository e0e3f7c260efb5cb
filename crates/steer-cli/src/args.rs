//! The engine flags every serving command shares (`steer echo`, `steer
//! proxy`), flattened into each command's arguments, and the one place that
//! turns them into an [`EngineBuilder`].

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use steer_core::cpu::CpuSet;
use steer_core::policy::Policy;
use steer_engine::engine::{Engine, EngineBuilder, EngineReport, RpsMode};
use steer_engine::observe::DEFAULT_RUN_DIR;
use topology::Topology;
use xdp_io::{BindMode, XdpMode};

/// On or off, for switches that have a default either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

impl OnOff {
    /// Whether it is [`OnOff::On`].
    pub fn is_on(self) -> bool {
        self == Self::On
    }
}

/// Where flows without a learned or pinned CPU run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rps {
    /// Local with an rx queue per CPU, spread otherwise.
    Auto,
    /// Flows stay on their rx queue's CPU unless learned or pinned elsewhere.
    Local,
    /// Flows are spread over the worker CPUs by hash.
    Spread,
}

/// XDP attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttachMode {
    /// Native, falling back to generic.
    Auto,
    /// The driver's XDP hook.
    Native,
    /// The generic (skb) hook.
    Generic,
}

/// AF_XDP bind mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Bind {
    /// Zero-copy, falling back to copy.
    Auto,
    /// Copy mode.
    Copy,
    /// Zero-copy mode (needs driver support).
    Zerocopy,
}

/// The engine's settings on the command line.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// The interface to serve on.
    #[arg(long, short = 'i')]
    pub interface: String,
    /// Worker CPUs, kernel list format, e.g. `0-3,8` (default: all online CPUs).
    #[arg(long)]
    pub cpus: Option<CpuSet>,
    /// Rx queues to open, e.g. `0,1` (default: all).
    #[arg(long, value_delimiter = ',')]
    pub queues: Option<Vec<u32>>,
    /// Desired-table update policy: `llc` (rewrite only across LLCs) or `always`.
    #[arg(long, default_value = "llc")]
    pub policy: Policy,
    /// The same-CPU fast path.
    #[arg(long, value_enum, default_value = "on")]
    pub fast_path: OnOff,
    /// Where flows go before anything is learned (RPS).
    #[arg(long, value_enum, default_value = "auto")]
    pub rps: Rps,
    /// The load balancer: moves flows nobody claimed (no pin, no reader)
    /// off overloaded workers by measured busy time, never reordering.
    #[arg(long, value_enum, default_value = "off")]
    pub balance: OnOff,
    /// Busy-poll instead of sleeping when idle.
    #[arg(long)]
    pub busy_poll: bool,
    /// Empty rounds a worker spins before sleeping.
    #[arg(long, default_value_t = 64)]
    pub idle_spins: u32,
    /// Slots of each dispatcher-to-worker ring (a power of two).
    #[arg(long, default_value_t = 1024)]
    pub ring_size: usize,
    /// UMEM frames.
    #[arg(long, default_value_t = 8192)]
    pub frames: u32,
    /// AF_XDP ring size.
    #[arg(long, default_value_t = 2048)]
    pub xsk_ring_size: u32,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: AttachMode,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub bind: Bind,
    /// Use this hwloc synthetic topology for the LLC rule instead of the
    /// machine's (e.g. `pack:2 l3:1 core:1 pu:1`: two CPUs in two LLCs).
    #[arg(long)]
    pub topology: Option<String>,
    /// Leave the workers unpinned.
    #[arg(long)]
    pub no_pin: bool,
    /// Entries of the desired-CPU table (a power of two): flows sharing an
    /// entry overwrite each other's CPU, whatever the policy.
    #[arg(long, default_value_t = 65536)]
    pub flow_table: usize,
    /// Scheduling slice the workers ask for, in microseconds (Linux >= 6.12;
    /// the kernel grants 100 or more); 0 keeps the kernel's default.
    #[arg(long, default_value_t = 100)]
    pub worker_slice_us: u64,
    /// Record a trace `steer replay` reads (packet arrivals, consumption,
    /// the machine and these settings) to FILE.
    #[arg(long, value_name = "FILE")]
    pub record_trace: Option<PathBuf>,
    /// At most this many events in the trace.
    #[arg(long, default_value_t = 1_000_000)]
    pub record_trace_max: u64,
    /// Serve Prometheus metrics on http://ADDR/metrics, e.g.
    /// `127.0.0.1:9464` (port 0: a free port, printed at start).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Directory of the stats socket `steer stats` and `steer top` read.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
}

impl EngineArgs {
    /// An engine builder with every flag applied (the application part,
    /// owned ports and handler or flow delivery, is the command's).
    pub fn builder(&self) -> anyhow::Result<EngineBuilder> {
        let mut builder = Engine::builder(&self.interface)
            .policy(self.policy)
            .fast_path(self.fast_path.is_on())
            .balance(self.balance.is_on())
            .busy_poll(self.busy_poll)
            .idle_spins(self.idle_spins)
            .flow_tables(self.flow_table, 4096)
            .worker_slice(
                (self.worker_slice_us > 0).then(|| Duration::from_micros(self.worker_slice_us)),
            )
            .ring_capacity(self.ring_size)
            .frames(self.frames, self.xsk_ring_size)
            .xdp_mode(match self.xdp_mode {
                AttachMode::Auto => XdpMode::Auto,
                AttachMode::Native => XdpMode::Native,
                AttachMode::Generic => XdpMode::Generic,
            })
            .bind_mode(match self.bind {
                Bind::Auto => BindMode::Auto,
                Bind::Copy => BindMode::Copy,
                Bind::Zerocopy => BindMode::ZeroCopy,
            });
        if let Some(cpus) = &self.cpus {
            builder = builder.cpus(*cpus);
        }
        if let Some(q) = &self.queues {
            builder = builder.queues(q.iter().copied());
        }
        if let Some(spec) = &self.topology {
            builder = builder.topology(Topology::synthetic(spec)?);
        }
        if let Some(path) = &self.record_trace {
            builder = builder.record_trace(path, self.record_trace_max);
        }
        builder = builder.stats_dir(&self.run_dir);
        if let Some(addr) = self.metrics {
            builder = builder.metrics(addr);
        }
        // After `topology`, which turns pinning off for a model.
        builder = builder.pin_workers(!self.no_pin);
        match self.rps {
            Rps::Auto => {}
            Rps::Local => builder = builder.rps(RpsMode::Local),
            Rps::Spread => builder = builder.rps(RpsMode::Spread),
        }
        Ok(builder)
    }
}

/// Says where to watch a running engine: its stats socket and metrics.
pub fn print_endpoints(command: &str, engine: &Engine, interface: &str) {
    let mut out = std::io::stdout();
    if let Some(path) = engine.stats_socket() {
        let _ = writeln!(
            out,
            "steer {command}: stats socket {} (`steer stats {interface}`, `steer top {interface}`)",
            path.display()
        );
    }
    if let Some(addr) = engine.metrics_addr() {
        let _ = writeln!(out, "steer {command}: metrics on http://{addr}/metrics");
    }
}

/// Says where the trace went, if one was recorded (stdout may be gone).
pub fn print_trace(command: &str, report: &EngineReport) {
    if let Some(t) = &report.trace {
        let _ = writeln!(
            std::io::stdout(),
            "steer {command}: trace {}: {} events ({} lost, {} over the limit){}; \
             replay it with `steer replay --policy both --table {}`",
            t.path.display(),
            t.events,
            t.dropped,
            t.over_limit,
            t.error
                .as_ref()
                .map_or(String::new(), |e| format!(", cut short: {e}")),
            t.path.display(),
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Probe {
        #[command(flatten)]
        engine: EngineArgs,
    }

    #[test]
    fn defaults_and_overrides_parse() {
        let p = Probe::parse_from(["x", "-i", "eth1"]);
        assert_eq!(p.engine.policy, Policy::LlcAffinity);
        assert!(p.engine.fast_path.is_on());
        assert_eq!(p.engine.frames, 8192);
        assert!(!p.engine.balance.is_on());
        let p = Probe::parse_from([
            "x",
            "--interface",
            "eth1",
            "--cpus",
            "1",
            "--policy",
            "always",
            "--fast-path",
            "off",
            "--queues",
            "0,1",
            "--balance",
            "on",
        ]);
        assert!(p.engine.balance.is_on());
        assert_eq!(p.engine.cpus, Some("1".parse().unwrap()));
        assert_eq!(p.engine.policy, Policy::Always);
        assert!(!p.engine.fast_path.is_on());
        assert_eq!(p.engine.queues, Some(vec![0, 1]));
    }

    #[test]
    fn a_bad_topology_is_an_error_not_a_panic() {
        let p = Probe::parse_from(["x", "-i", "eth1", "--topology", "nonsense:"]);
        assert!(p.engine.builder().is_err());
    }
}
