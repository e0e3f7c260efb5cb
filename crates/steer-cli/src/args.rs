//! The engine flags every serving command shares (`steer echo`, `steer
//! proxy`), flattened into each command's arguments, and the one place that
//! turns them into an [`EngineBuilder`].

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use steer_core::cpu::{CpuId, CpuSet};
use steer_core::flow::{AnyHasher, KeyedHasher, ToeplitzHasher, MS_RSS_KEY, SYMMETRIC_RSS_KEY};
use steer_core::policy::Policy;
use steer_core::runtime::RestartLimit;
use steer_engine::engine::{Engine, EngineBuilder, EngineReport, RpsMode, WorkerLoss};
use steer_engine::observe::DEFAULT_RUN_DIR;
use steer_topology::Topology;
use steer_xdp::{BindMode, XdpAttach, XdpMode};

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

/// How the XDP program is held on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Hold {
    /// A bpf_link this process holds: the kernel detaches the program when
    /// the process ends, however it ends.
    Link,
    /// Netlink (libxdp): stays attached after a crash until the next engine
    /// replaces it; runs beside other programs through libxdp's dispatcher.
    Netlink,
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

/// Multi-buffer AF_XDP (packets spanning several UMEM frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MultiBufferArg {
    /// On when the interface's MTU does not fit one frame.
    Auto,
    /// Always on.
    On,
    /// Always off.
    Off,
}

/// The flow hash the dispatchers steer by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HashKind {
    /// foldhash with a random per-process seed.
    Keyed,
    /// The NIC's RSS (Toeplitz) hash, with the key of `--rss-key`.
    Toeplitz,
}

/// The engine's settings on the command line.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Read options from this TOML file: each key is a long option of this
    /// command (`workers = 2`, `port = [7000, 7001]`, `no-table = true`);
    /// options on the command line override the file's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The interface to serve on.
    #[arg(long, short = 'i')]
    pub interface: String,
    /// Worker CPUs, kernel list format, e.g. `0-3,8` (default: all online CPUs).
    #[arg(long, value_parser = cpu_list)]
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
    /// Drop an elephant flow's excess when a worker's ring is over half full
    /// (the kernel's flow_limit), with a table of BUCKETS flow counters per
    /// CPU (a power of two; the kernel uses 4096).
    #[arg(long, value_name = "BUCKETS")]
    pub flow_limit: Option<usize>,
    /// The steering hook called on every move of a flow (the
    /// `ndo_rx_flow_steer` analog): `none` (software steering only) or
    /// `ntuple` (an ethtool ntuple rule sends each moved flow to the rx
    /// queue of its new CPU, queue i being served by the i-th worker CPU;
    /// needs a NIC with ntuple filters, `ethtool -K IF ntuple on`). The
    /// rules go when steer stops.
    #[arg(long, value_enum, default_value = "none")]
    pub steer_hook: SteerHookArg,
    /// Most ntuple rules each rx queue's hook installs (`--steer-hook
    /// ntuple`); past it the oldest flow's rule is replaced.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub ntuple_rules: u32,
    /// Busy-poll instead of sleeping when idle (same as `--idle busy-poll`).
    #[arg(long)]
    pub busy_poll: bool,
    /// How an idle worker waits: `sleep` (until woken, at once),
    /// `adaptive` (poll for a window that follows how long idle spells
    /// last, up to --spin-max-us, within --spin-budget percent of a CPU,
    /// then sleep: the guest haltpoll rule), `defer` (after work, nap
    /// --nap-us on a timer and poll again, --naps empty naps in a row
    /// before sleeping until woken: under steady load nobody has to wake
    /// it, for up to --nap-us more latency), `coalesce` (while packets
    /// come close together, nap for a window sized to gather
    /// --coalesce-batch of them, at most --coalesce-max-us; while they come
    /// far apart, `sleep`: NIC adaptive interrupt moderation) or
    /// `busy-poll` (never sleep). Default: `coalesce`, but `sleep` where
    /// flows' tasks run on the workers (`steer proxy --runtime worker`),
    /// whose own I/O would wait out the naps.
    #[arg(long, value_enum)]
    pub idle: Option<Idle>,
    /// The longest nap of `--idle coalesce`, microseconds: the most
    /// latency it adds to a packet [default: 200].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub coalesce_max_us: Option<u64>,
    /// Packets a nap of `--idle coalesce` is sized to gather [default: 8].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub coalesce_batch: Option<u32>,
    /// Preferred busy polling on the AF_XDP sockets, microseconds of
    /// `SO_BUSY_POLL` (0: off): the worker's own system calls run the
    /// device's NAPI, and with the device's napi_defer_hard_irqs and
    /// gro_flush_timeout set its interrupts stay off while the worker polls.
    /// Needs a driver with NAPI.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub prefer_busy_poll_us: u32,
    /// The longest polling window of `--idle adaptive`, microseconds.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub spin_max_us: u64,
    /// Most of a CPU, in percent, `--idle adaptive` spends polling without
    /// finding work.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub spin_budget: u8,
    /// One nap of `--idle defer`, microseconds: the most latency it adds.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub nap_us: u64,
    /// Empty naps in a row before `--idle defer` sleeps until woken.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub naps: u32,
    /// Empty rounds a worker spins before it naps or sleeps (each costs
    /// CPU whether or not a packet comes; `--idle adaptive` spins for a
    /// learned time instead).
    #[arg(long, default_value_t = 0)]
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
    /// Bytes per UMEM frame: 2048 or 4096. A packet longer than one frame
    /// spans several (multi-buffer AF_XDP; see --multi-buffer).
    #[arg(long, default_value_t = 2048)]
    pub frame_size: u32,
    /// Packets spanning several frames (jumbo frames): `auto` when the
    /// interface's MTU does not fit one frame, `on`, or `off` (an MTU that
    /// does not fit one frame is then refused at start).
    #[arg(long, value_enum, default_value = "auto")]
    pub multi_buffer: MultiBufferArg,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: AttachMode,
    /// How the XDP program is held: `link` goes away with this process,
    /// however it ends; `netlink` stays after a crash until replaced.
    #[arg(long, value_enum, default_value = "link")]
    pub xdp_attach: Hold,
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
    /// The flow hash: `keyed` (foldhash, random seed) or `toeplitz` (what a
    /// NIC's RSS computes, so steer spreads flows as the NIC does).
    #[arg(long, value_enum, default_value = "keyed")]
    pub hash: HashKind,
    /// Hash both directions of a flow alike (the canonical 5-tuple).
    #[arg(long)]
    pub symmetric_hash: bool,
    /// The Toeplitz key (with `--hash toeplitz`): `ms` (the usual NIC
    /// default), `symmetric` (0x6d5a repeated: both directions alike on
    /// the NIC too), or the key's bytes in hex as `ethtool -x` prints them
    /// (`6d:5a:56:...`, at least 40 bytes).
    #[arg(long, value_name = "KEY")]
    pub rss_key: Option<String>,
    /// Steer by the NIC's receive (RSS) hash instead of hashing each
    /// packet (packets whose hash covers the 5-tuple); needs a driver with
    /// the XDP rx-hash kfunc (Linux >= 6.3) and native XDP mode.
    #[arg(long)]
    pub rx_hash: bool,
    /// Record a trace `steer replay` reads (packet arrivals, consumption,
    /// the machine and these settings) to FILE.
    #[arg(long, value_name = "FILE")]
    pub record_trace: Option<PathBuf>,
    /// At most this many events in the trace.
    #[arg(long, default_value_t = 1_000_000)]
    pub record_trace_max: u64,
    /// Serve Prometheus metrics (read-only) on http://ADDR/metrics: a port
    /// alone binds loopback (`9464` is `127.0.0.1:9464`); name the address
    /// to serve beyond the machine (`0.0.0.0:9464`). Port 0: a free port,
    /// printed at start.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = metrics_addr)]
    pub metrics: Option<SocketAddr>,
    /// Directory of the stats socket `steer stats` and `steer top` read.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// Let the members of group NAME read the stats socket (mode 0660 with
    /// that group) besides root (0600 otherwise).
    #[arg(long, value_name = "NAME")]
    pub stats_group: Option<String>,
    /// Serve no stats socket (`steer stats` and `steer top` cannot read
    /// this engine; a second engine on the interface is still refused).
    #[arg(long)]
    pub no_stats_socket: bool,
    /// Keep every capability after setup (by default the engine drops all
    /// it does not need at run time: all of them with `--xdp-attach link`,
    /// all but CAP_NET_ADMIN with `netlink`).
    #[arg(long)]
    pub keep_capabilities: bool,
    /// `--user`, `--group`, `--seccomp`.
    #[command(flatten)]
    pub privileges: crate::least_privilege::PrivilegeArgs,
    /// What to do when every worker died (each handler panicked past
    /// `--worker-restarts`): `open` passes the owned traffic to the kernel
    /// and keeps running; `closed` stops and exits non-zero.
    #[arg(long, value_enum, default_value = "open")]
    pub on_worker_loss: WorkerLossArg,
    /// Restarts a minute allowed to each worker whose handler panicked
    /// (each loses the packet it panicked on); past that the worker is
    /// given up and its flows move to the others. 0 never restarts.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub worker_restarts: u32,
}

/// The steering hook (`--steer-hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SteerHookArg {
    /// Software steering only.
    None,
    /// ethtool ntuple rules on the NIC.
    Ntuple,
}

/// How an idle worker waits (`--idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Idle {
    /// Poll for an adaptive window after work, then sleep until woken.
    Adaptive,
    /// Nap on a timer after work, then sleep until woken.
    Defer,
    /// Nap for a window sized to gather a batch while packets come close
    /// together; sleep until woken while they come far apart.
    Coalesce,
    /// Sleep until woken at once.
    Sleep,
    /// Never sleep.
    BusyPoll,
}

impl EngineArgs {
    /// The ntuple hook's factory, after a probe of the device: a device
    /// without ntuple filters is refused here, in one line.
    fn ntuple_hook(
        &self,
    ) -> anyhow::Result<impl Fn(u32) -> Box<dyn steer_core::hook::SteerHook + Send> + Send + Sync>
    {
        use steer_xdp::ntuple::NtupleSteering;
        let interface = self.interface.clone();
        NtupleSteering::new(&interface, |_| None, 1).map_err(|e| {
            anyhow::anyhow!("--steer-hook ntuple (drop it to steer in software only): {e}")
        })?;
        let workers: Option<Vec<CpuId>> = self.cpus.map(|c| c.iter().collect());
        let budget = self.ntuple_rules as usize;
        Ok(
            move |rxq: u32| -> Box<dyn steer_core::hook::SteerHook + Send> {
                let workers = workers.clone();
                // Queue i is served by the i-th worker CPU (CPU i when the
                // workers are every CPU).
                let queue_of = move |cpu: CpuId| match &workers {
                    Some(w) => w.iter().position(|&c| c == cpu).map(|i| i as u32),
                    None => u32::try_from(cpu).ok(),
                };
                match NtupleSteering::new(&interface, queue_of, budget) {
                    Ok(hook) => Box::new(hook),
                    Err(e) => {
                        tracing::warn!(rxq, error = %e, "no ntuple hook for this rx queue: software steering only");
                        Box::new(steer_core::hook::NoopHook)
                    }
                }
            },
        )
    }

    /// An engine builder with every flag applied (the application part,
    /// owned ports and handler or flow delivery, is the command's).
    pub fn builder(&self) -> anyhow::Result<EngineBuilder> {
        let mut builder = Engine::builder(&self.interface)
            .policy(self.policy)
            .fast_path(self.fast_path.is_on())
            .balance(self.balance.is_on())
            .busy_poll(self.busy_poll || self.idle == Some(Idle::BusyPoll))
            .defer(match self.idle {
                Some(Idle::Defer) => Some(steer_core::runtime::Defer {
                    nap: Duration::from_micros(self.nap_us),
                    empty_naps: self.naps,
                }),
                _ => None,
            })
            .idle_spins(self.idle_spins)
            .adaptive((self.idle == Some(Idle::Adaptive)).then(|| {
                let max = Duration::from_micros(self.spin_max_us);
                steer_core::runtime::AdaptiveSpin {
                    grow_start: steer_core::runtime::AdaptiveSpin::default()
                        .grow_start
                        .min(max),
                    max,
                    budget_percent: self.spin_budget,
                }
            }))
            .flow_tables(self.flow_table, 4096)
            .worker_slice(
                (self.worker_slice_us > 0).then(|| Duration::from_micros(self.worker_slice_us)),
            )
            .ring_capacity(self.ring_size)
            .use_rx_hash(self.rx_hash)
            .frames(self.frames, self.xsk_ring_size)
            .frame_size(self.frame_size)
            .multi_buffer(match self.multi_buffer {
                MultiBufferArg::Auto => steer_xdp::MultiBuffer::Auto,
                MultiBufferArg::On => steer_xdp::MultiBuffer::On,
                MultiBufferArg::Off => steer_xdp::MultiBuffer::Off,
            })
            .xdp_mode(match self.xdp_mode {
                AttachMode::Auto => XdpMode::Auto,
                AttachMode::Native => XdpMode::Native,
                AttachMode::Generic => XdpMode::Generic,
            })
            .xdp_attach(match self.xdp_attach {
                Hold::Link => XdpAttach::Link,
                Hold::Netlink => XdpAttach::Netlink,
            })
            .bind_mode(match self.bind {
                Bind::Auto => BindMode::Auto,
                Bind::Copy => BindMode::Copy,
                Bind::Zerocopy => BindMode::ZeroCopy,
            });
        if let Some(buckets) = self.flow_limit {
            builder = builder.flow_limit(buckets);
        }
        if let Some(cpus) = &self.cpus {
            builder = builder.cpus(*cpus);
        }
        if let Some(q) = &self.queues {
            builder = builder.queues(q.iter().copied());
        }
        if let Some(spec) = &self.topology {
            builder = builder.topology(Topology::synthetic(spec)?);
        }
        builder = builder.hasher(self.hasher()?);
        if let Some(path) = &self.record_trace {
            builder = builder.record_trace(path, self.record_trace_max);
        }
        builder = builder.stats_dir(&self.run_dir);
        if let Some(group) = &self.stats_group {
            builder = builder.stats_group(group);
        }
        if self.no_stats_socket {
            builder = builder.stats_socket(false);
        }
        if self.steer_hook == SteerHookArg::Ntuple {
            builder = builder.hook(self.ntuple_hook()?);
        }
        builder = builder.drop_privileges(!self.keep_capabilities);
        // Looked up now: an unknown user fails before anything is touched.
        if let Some(user) = self.privileges.run_as()? {
            builder = builder.run_as(user);
        }
        builder = builder.worker_restarts(RestartLimit::per_minute(self.worker_restarts));
        builder = builder.on_worker_loss(match self.on_worker_loss {
            WorkerLossArg::Open => WorkerLoss::FailOpen,
            WorkerLossArg::Closed => WorkerLoss::FailClosed,
        });
        if let Some(addr) = self.metrics {
            builder = builder.metrics(addr);
        }
        builder = builder.pin_workers(!self.no_pin);
        match self.rps {
            Rps::Auto => {}
            Rps::Local => builder = builder.rps(RpsMode::Local),
            Rps::Spread => builder = builder.rps(RpsMode::Spread),
        }
        if self.prefer_busy_poll_us > 0 {
            builder = builder.prefer_busy_poll(Some(self.prefer_busy_poll_us));
        }
        if let Some(coalesce) = self.coalesce() {
            builder = builder.coalesce(coalesce);
        }
        Ok(builder)
    }

    /// Receive coalescing as the flags ask: `None` to keep the engine's
    /// default (no `--idle`, no coalescing flag), `Some(None)` for none
    /// (another `--idle`), or the settings.
    fn coalesce(&self) -> Option<Option<steer_core::runtime::Coalesce>> {
        use steer_core::runtime::Coalesce;
        let tuned = self.coalesce_max_us.is_some() || self.coalesce_batch.is_some();
        match self.idle {
            None if !tuned => return None,
            None | Some(Idle::Coalesce) => {}
            Some(_) => return Some(None),
        }
        let default = Coalesce::default();
        let max_nap = self
            .coalesce_max_us
            .map_or(default.max_nap, Duration::from_micros);
        Some(Some(Coalesce {
            min_nap: default.min_nap.min(max_nap),
            max_nap,
            batch: self.coalesce_batch.unwrap_or(default.batch),
        }))
    }
}

impl EngineArgs {
    /// The hasher `--hash`, `--symmetric-hash` and `--rss-key` name.
    pub fn hasher(&self) -> anyhow::Result<AnyHasher> {
        Ok(match self.hash {
            HashKind::Keyed => {
                if self.rss_key.is_some() {
                    anyhow::bail!("--rss-key is the Toeplitz key: add --hash toeplitz");
                }
                KeyedHasher::random().symmetric(self.symmetric_hash).into()
            }
            HashKind::Toeplitz => {
                let key = match self.rss_key.as_deref() {
                    None | Some("ms") => MS_RSS_KEY.to_vec(),
                    Some("symmetric") => SYMMETRIC_RSS_KEY.to_vec(),
                    Some(hex) => parse_hex_key(hex)?,
                };
                ToeplitzHasher::new(&key)
                    .map_err(|e| anyhow::anyhow!("--rss-key: {e}"))?
                    .symmetric(self.symmetric_hash)
                    .into()
            }
        })
    }
}

/// Key bytes written in hex, with or without `:`, `-` or space between
/// them (`6d:5a:56:da` as `ethtool -x` prints, or `6d5a56da`).
fn parse_hex_key(text: &str) -> anyhow::Result<Vec<u8>> {
    let digits: String = text
        .chars()
        .filter(|c| !matches!(c, ':' | '-' | ' '))
        .collect();
    let bad = || {
        anyhow::anyhow!(
            "--rss-key {text:?}: not hex bytes (give `ms`, `symmetric`, or the key as \
             `ethtool -x` prints it, e.g. 6d:5a:56:...)"
        )
    };
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|_| bad()))
        .collect()
}

/// Longest time any flag takes, in seconds (about 31 years): beyond it a
/// deadline would overflow the clock.
const MAX_SECONDS: f64 = 1e9;

/// How long a server runs and what it leaves behind: the options `steer
/// echo`, `tcp-echo` and `rfs` share.
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Write the final counters here on exit (`steer echo`'s with the
    /// frame accounting).
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long, value_parser = seconds)]
    pub duration: Option<f64>,
    /// Do not print the live table.
    #[arg(long)]
    pub no_table: bool,
}

impl RunArgs {
    /// When a run that began at `started` ends by `--duration` (none: only
    /// at a signal).
    pub fn deadline(&self, started: std::time::Instant) -> Option<std::time::Instant> {
        self.duration
            .map(|s| started + Duration::from_secs_f64(s.max(0.0)))
    }
}

/// A number of seconds, 0 or more (`--duration`, `--timeout`, ...).
pub fn seconds(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (e.g. 10 or 0.5)"))?;
    if !(0.0..=MAX_SECONDS).contains(&v) {
        return Err(format!(
            "{text:?} is not a number of seconds between 0 and {MAX_SECONDS:e} (e.g. 10 or 0.5)"
        ));
    }
    Ok(v)
}

/// A number of seconds above 0 (`--idle-timeout`, `--move-every`, ...).
pub fn positive_seconds(text: &str) -> Result<f64, String> {
    match seconds(text)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!(
            "{text:?}: give a time above 0 seconds (e.g. 1 or 0.5)"
        )),
    }
}

/// A rate above 0 (per second), finite.
pub fn positive_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a rate above 0 (e.g. 1000)")),
    }
}

/// A CPU list in the kernel's format, not empty (`--cpus`).
pub fn cpu_list(text: &str) -> Result<CpuSet, String> {
    let set: CpuSet = text.parse().map_err(|e| format!("{e}"))?;
    if set.is_empty() {
        return Err(format!(
            "{text:?} names no CPU: give a list such as 0-3 or 0,2"
        ));
    }
    Ok(set)
}

/// `--on-worker-loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkerLossArg {
    /// Fail open: the kernel gets the owned traffic.
    Open,
    /// Fail closed: stop and exit non-zero.
    Closed,
}

/// Fails when the engine lost every worker and `--on-worker-loss closed`
/// asks to stop: the run loops call it once per round.
pub fn check_workers(engine: &Engine, args: &EngineArgs) -> anyhow::Result<()> {
    if args.on_worker_loss == WorkerLossArg::Closed && engine.workers_lost() {
        anyhow::bail!(
            "every worker died (their handlers panicked; see the log): stopping, as \
             --on-worker-loss closed asks"
        );
    }
    Ok(())
}

/// `--metrics`: an address, or a port alone on loopback.
pub(crate) fn metrics_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        format!("{text:?} is neither a port nor an address with a port (e.g. 9464, 127.0.0.1:9464)")
    })
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
            "--flow-limit",
            "4096",
        ]);
        assert!(p.engine.balance.is_on());
        assert_eq!(p.engine.cpus, Some("1".parse().unwrap()));
        assert_eq!(p.engine.policy, Policy::Always);
        assert!(!p.engine.fast_path.is_on());
        assert_eq!(p.engine.queues, Some(vec![0, 1]));
        assert_eq!(p.engine.flow_limit, Some(4096));
    }

    #[test]
    fn the_hash_flags_pick_the_hasher_and_bad_keys_are_one_line_errors() {
        use steer_core::flow::{flow_key, FlowHasher};
        use steer_core::packet::build::FrameBuilder;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x", "-i", "eth1"];
            argv.extend_from_slice(extra);
            Probe::parse_from(argv).engine.hasher()
        };
        let frame = FrameBuilder::udp(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            4000,
            53,
        )
        .build();
        let key = flow_key(&frame).unwrap().unwrap();
        assert_eq!(parse(&[]).unwrap().name(), "keyed");
        let sym = parse(&["--symmetric-hash"]).unwrap();
        assert!(sym.is_symmetric());
        assert_eq!(sym.hash(&key), sym.hash(&key.reversed()));
        let ms = parse(&["--hash", "toeplitz"]).unwrap();
        assert_eq!(ms.hash(&key), ToeplitzHasher::default().hash(&key));
        let hex: Vec<String> = SYMMETRIC_RSS_KEY
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let given = parse(&["--hash", "toeplitz", "--rss-key", &hex.join(":")]).unwrap();
        let named = parse(&["--hash", "toeplitz", "--rss-key", "symmetric"]).unwrap();
        assert_eq!(given.hash(&key), named.hash(&key));
        assert_eq!(named.hash(&key), named.hash(&key.reversed()));
        assert_ne!(named.hash(&key), ms.hash(&key));
        let short = parse(&["--hash", "toeplitz", "--rss-key", &hex[..20].join(":")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            short, "--rss-key: Toeplitz key of 20 bytes, at least 40 needed",
            "{short}"
        );
        for bad in ["zz", "6d5", ""] {
            let e = parse(&["--hash", "toeplitz", "--rss-key", bad]).unwrap_err();
            assert!(
                !e.to_string().contains('\n') && e.to_string().contains("hex"),
                "{e}"
            );
        }
        let e = parse(&["--rss-key", "ms"]).unwrap_err();
        assert!(e.to_string().contains("--hash toeplitz"), "{e}");
    }

    #[test]
    fn metrics_bind_loopback_unless_an_address_is_named() {
        assert_eq!(
            metrics_addr("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            metrics_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(metrics_addr("[::1]:1").unwrap(), "[::1]:1".parse().unwrap());
        assert!(metrics_addr("localhost").is_err());
        let p = Probe::parse_from(["x", "-i", "eth1", "--metrics", "0"]);
        assert!(p.engine.metrics.unwrap().ip().is_loopback());
    }

    #[test]
    fn coalescing_is_the_engines_default_unless_flags_choose() {
        use steer_core::runtime::Coalesce;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x", "-i", "eth1"];
            argv.extend_from_slice(extra);
            Probe::parse_from(argv).engine.coalesce()
        };
        assert_eq!(parse(&[]), None, "the engine's default stands");
        assert_eq!(parse(&["--idle", "sleep"]), Some(None));
        assert_eq!(parse(&["--idle", "busy-poll"]), Some(None));
        assert_eq!(
            parse(&["--idle", "coalesce"]),
            Some(Some(Coalesce::default()))
        );
        let tuned = parse(&["--coalesce-max-us", "100", "--coalesce-batch", "4"]);
        assert_eq!(
            tuned,
            Some(Some(Coalesce {
                max_nap: Duration::from_micros(100),
                batch: 4,
                ..Coalesce::default()
            }))
        );
        // A longest nap under the default shortest one: the shortest follows.
        let tiny = parse(&["--idle", "coalesce", "--coalesce-max-us", "5"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (tiny.min_nap, tiny.max_nap),
            (Duration::from_micros(5), Duration::from_micros(5))
        );
    }

    #[test]
    fn a_bad_topology_is_an_error_not_a_panic() {
        let p = Probe::parse_from(["x", "-i", "eth1", "--topology", "nonsense:"]);
        assert!(p.engine.builder().is_err());
    }
}
