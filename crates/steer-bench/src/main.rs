//! `steer-bench`: see the crate docs and benches/README.md.
//!
//! ```text
//! steer-bench run [--quick] [--runs 3] [--rates 50k,200k] [--servers steer,kernel-echo,...]
//!                 [--steer-cmd CMD] [--json FILE]
//! steer-bench load --server steer --rate 100k|max [--secs 5]
//! steer-bench frontier [--rates 20k,50k] [--runs 3] [--arrivals smooth|bursty] [--json FILE]
//! steer-bench sockperf parse FILE | check-fixtures DIR | compare --work DIR ...
//! steer-bench compare-kernel [--quick] [-t SECS] [-c CLIENTS] [--json FILE]
//! steer-bench seed llc-updates|tcp-llc-updates|sockmap-affinity|false-sharing|fast-path
//!                  [--quick] [--runs N] [--json FILE]
//! steer-bench seed medians FILE.json...
//! steer-bench hostile [--quick] [--rates 5000,20000] [--nofile 1024,20000] [--runs 3] [--json FILE]
//! steer-bench kernel-echo --addr IP:PORT --cpus 1      (helper: the kernel server)
//! steer-bench afxdp-echo --interface IF --port P --cpu 1  (helper: raw AF_XDP turnaround)
//! ```

#![deny(unsafe_code)]

use std::{
    net::SocketAddrV4,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use steer_bench::{
    args::{
        parse_cpu_pair, parse_cpus, parse_kind, parse_kv, parse_pps, parse_rate, CpuList, Rate,
    },
    bench::{self, BenchConfig},
    pacing::Arrivals,
    report::{self, Report},
    servers::Kind,
    sockperf, sys,
};
use tracing_subscriber::EnvFilter;

/// Load generator and checker: steer's echo server against the kernel, the
/// raw AF_XDP turnaround and an XDP_TX reflector, on a veth pair it builds.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The whole comparison: every server, capacity, cost at fixed rates, latency.
    Run(RunArgs),
    /// One server at one rate, with the per-flow table.
    Load(LoadArgs),
    /// Latency against CPU: steer in each idle policy and the kernel echo
    /// (busy poll, interrupt deferral) at each rate; JSON for `steer plot`.
    Frontier(FrontierArgs),
    /// sockperf client reports: parse, check the fixtures, compare a kept
    /// `compare-kernel --keep-logs` directory.
    #[command(subcommand)]
    Sockperf(SockperfCmd),
    /// The sockperf comparison: sockperf clients against `sockperf server`
    /// (RPS/RFS) and steer's echo server.
    CompareKernel(steer_bench::compare_kernel::CompareKernel),
    /// A proxy in front of a spray of new flows: a well-behaved client's
    /// answers and latency, the proxy's descriptors and memory, for steer's
    /// proxy and the plain tokio one.
    Hostile(HostileArgs),
    /// `steer rfs` beside an unmodified iperf3 whose reading thread moves
    /// between CPUs: steering updates under `llc` and `always`, segments
    /// out of order, throughput, against the kernel path alone.
    Transparent(TransparentArgs),
    /// The seed reproductions (benches/seeds/README.md) and their medians.
    #[command(subcommand)]
    Seed(steer_bench::seeds::SeedCmd),
    /// Helper: the kernel UDP echo (recvmmsg/sendmmsg, SO_REUSEPORT, a pinned thread per CPU).
    #[command(hide = true)]
    KernelEcho {
        /// Address to serve on.
        #[arg(long)]
        addr: SocketAddrV4,
        /// Server CPUs (list: 1 or 0-3,5).
        #[arg(long, value_parser = parse_cpus)]
        cpus: CpuList,
        /// SO_BUSY_POLL on each socket, microseconds (0: off).
        #[arg(long, default_value_t = 0)]
        busy_poll_us: u32,
    },
    /// Helper: the raw AF_XDP rx->tx turnaround.
    #[command(hide = true)]
    AfxdpEcho {
        /// Interface.
        #[arg(long)]
        interface: String,
        /// UDP port.
        #[arg(long)]
        port: u16,
        /// CPU to poll on.
        #[arg(long, default_value_t = 1)]
        cpu: usize,
    },
}

#[derive(Debug, Args, Clone)]
struct HostileArgs {
    /// Short phases (2 s) and one run: a smoke test.
    #[arg(long)]
    quick: bool,
    /// Spray rates, new flows per second, paired with --nofile.
    #[arg(long, value_delimiter = ',', default_value = "5000,20000")]
    rates: Vec<u32>,
    /// The proxy's `ulimit -n` for each rate.
    #[arg(long, value_delimiter = ',', default_value = "1024,20000")]
    nofile: Vec<u64>,
    /// Seconds of spray (and of the client's baseline, at most 5).
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    /// Requests the well-behaved client sends in each phase (enough that
    /// its p99 is not simply its worst request: with 50, it is).
    #[arg(long, default_value_t = 500)]
    requests: u32,
    /// Distinct spray sources (0: a random address per datagram).
    #[arg(long, default_value_t = 0)]
    sources: u32,
    /// Runs of each (proxy, rate), interleaved.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Proxies: steer, kernel (the plain tokio proxy).
    #[arg(long, value_delimiter = ',', default_value = "steer,kernel")]
    proxies: Vec<String>,
    /// Extra flags for steer's proxy, as one string (for example
    /// "--max-starting 64 --runtime multi").
    #[arg(long, allow_hyphen_values = true, default_value = "")]
    steer_args: String,
    /// Run the proxy alone on CPU SERVER (steer with one worker there) and
    /// the sprayer, client and backend on CPU LOAD (default: all share
    /// every CPU).
    #[arg(long, value_name = "LOAD,SERVER", value_parser = parse_cpu_pair)]
    pin: Option<(usize, usize)>,
    /// Write every result here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct TransparentArgs {
    /// Seconds of iperf3 per run.
    #[arg(long, default_value_t = 10)]
    secs: u32,
    /// Parallel iperf3 streams.
    #[arg(long, default_value_t = 8)]
    streams: u32,
    /// Milliseconds between two moves of the server's thread.
    #[arg(long, default_value_t = 100)]
    move_every_ms: u64,
    /// Each stream's rate, iperf3 `-b` (e.g. 100M); default: as fast as it
    /// goes (on veth, losses in its XDP ring then dominate the counters).
    #[arg(long)]
    bitrate: Option<String>,
    /// Interleaved runs of every mode.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// The modes of each run, in order: none, pass, kernel-rfs, llc,
    /// always, llc-2llc, always-2llc (the last two on a 2-LLC model).
    #[arg(long, default_value = steer_bench::transparent::ALL_MODES,
          value_parser = steer_bench::transparent::parse_modes)]
    modes: ModeList,
    /// Write every result here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--modes` as clap holds it.
type ModeList = Vec<steer_bench::transparent::RunSpec>;

fn run_transparent(a: &TransparentArgs) -> Result<()> {
    use steer_bench::transparent::{self, TransparentConfig};
    let steer_bin = std::env::current_exe()?.with_file_name("steer");
    if !steer_bin.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p flowsteer-cli)",
            steer_bin.display()
        );
    }
    let cfg = TransparentConfig {
        modes: a.modes.clone(),
        steer_bin,
        secs: a.secs.max(1),
        streams: a.streams.max(1),
        bitrate: a.bitrate.clone(),
        move_every: std::time::Duration::from_millis(a.move_every_ms.max(1)),
        log_dir: std::env::temp_dir().join(format!("steer-bench-rfs-{}", std::process::id())),
    };
    let results = transparent::run(&cfg, a.runs)?;
    print!("{}", transparent::table(&results));
    if let Some(path) = &a.json {
        transparent::write_json(&results, path)?;
    }
    Ok(())
}

fn run_hostile(a: &HostileArgs) -> Result<()> {
    use steer_bench::hostile::{self, HostileConfig, ProxyKind};
    if a.rates.len() != a.nofile.len() {
        bail!("--rates and --nofile pair up: give as many of each");
    }
    let exe = std::env::current_exe().context("finding this binary")?;
    let steer_bin = exe
        .parent()
        .context("this binary has no directory")?
        .join("steer");
    if !steer_bin.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p flowsteer-cli)",
            steer_bin.display()
        );
    }
    let proxies = a
        .proxies
        .iter()
        .map(|p| match p.as_str() {
            "steer" => Ok(ProxyKind::Steer),
            "kernel" | "tokio" => Ok(ProxyKind::Kernel),
            other => bail!("--proxies: unknown proxy {other:?} (steer, kernel)"),
        })
        .collect::<Result<Vec<_>>>()?;
    // A smoke run keeps the old 50 requests: an unanswered one waits a
    // second.
    let (secs, runs, requests) = if a.quick {
        (2.0, 1, a.requests.min(50))
    } else {
        (a.secs, a.runs.max(1), a.requests)
    };
    let log_dir = std::env::temp_dir().join(format!("steer-bench-hostile-{}", std::process::id()));
    let mut results = Vec::new();
    for run in 0..runs {
        for (&rate, &nofile) in a.rates.iter().zip(&a.nofile) {
            for &proxy in &proxies {
                eprintln!(
                    "run {}/{runs}: {} proxy, ulimit -n {nofile}, {rate} new flows/s for {secs} s",
                    run + 1,
                    proxy.name()
                );
                let r = hostile::run(&HostileConfig {
                    steer_bin: steer_bin.clone(),
                    proxy,
                    nofile,
                    spray_rate: rate,
                    spray_sources: a.sources,
                    secs,
                    requests,
                    proxy_args: match proxy {
                        ProxyKind::Steer => {
                            a.steer_args.split_whitespace().map(String::from).collect()
                        }
                        ProxyKind::Kernel => Vec::new(),
                    },
                    pin: a.pin,
                    log_dir: log_dir.clone(),
                })?;
                if !r.alive {
                    eprintln!("  the {} proxy died: {}", proxy.name(), r.log_tail);
                }
                results.push(r);
            }
        }
    }
    print!("{}", hostile::table(&results));
    print!("{}", hostile::ratios(&results));
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[derive(Debug, Args, Clone)]
struct Common {
    /// Flows (distinct source ports).
    #[arg(long, default_value_t = 64)]
    flows: u16,
    /// The server's UDP port.
    #[arg(long, default_value_t = 11111)]
    port: u16,
    /// Source port of the first flow.
    #[arg(long, default_value_t = 40000)]
    sport_base: u16,
    /// The generator's CPU.
    #[arg(long, default_value_t = 0)]
    gen_cpu: usize,
    /// The server's CPUs (list).
    #[arg(long, default_value = "1", value_parser = parse_cpus)]
    server_cpus: CpuList,
    /// Queues per veth end.
    #[arg(long, default_value_t = 2)]
    queues: u32,
    /// Unequal flows: flow f's rate is proportional to W[f % len] (list,
    /// e.g. `1,3`): each queue gets the share of the rate its flows' weights
    /// add up to (flow f goes out on queue f % queues), and flow f sends W
    /// requests in a row at its turn. Default: every flow the same rate.
    #[arg(long, value_delimiter = ',')]
    weights: Vec<u32>,
    /// Let the generator's CPU also be a server CPU (a 2-CPU machine
    /// serving on both); the generator then takes time from that worker.
    #[arg(long)]
    gen_on_server_cpu: bool,
    /// steer's echo server command (words split on spaces; `--interface`,
    /// `--port`, `--cpus`, `--no-table`, `--stats-json` are appended).
    /// Default: `steer echo`, the `steer` binary next to this one.
    #[arg(long, env = "STEER_CMD")]
    steer_cmd: Option<String>,
    /// The task layout of the `steer-proxy` server (`steer proxy
    /// --runtime`): `worker` (the flows' tasks on steer's worker threads),
    /// `per-core` (a pinned current_thread runtime per CPU) or `multi`.
    #[arg(long, default_value = "worker", value_parser = ["worker", "per-core", "multi"])]
    proxy_runtime: String,
    /// Sending before each measurement window, ms.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Measurement window, seconds.
    #[arg(long, default_value_t = 3.0)]
    window_secs: f64,
    /// Waiting for late replies after sending stops, ms.
    #[arg(long, default_value_t = 300)]
    drain_ms: u64,
    /// Generator wake-up period at fixed rates, us.
    #[arg(long, default_value_t = 100)]
    tick_us: u64,
    /// How requests arrive at a fixed rate: `smooth` (what accrued since
    /// the last tick) or `bursty` (--burst packets back to back, the
    /// bursts spaced for the same mean rate).
    #[arg(long, default_value = "smooth", value_parser = ["smooth", "bursty"])]
    arrivals: String,
    /// Packets per burst with `--arrivals bursty`.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    burst: u64,
    /// Retries of a fixed-rate phase whose generator sent under 95% of
    /// the asked rate; still not held after them, it is flagged with what
    /// was saturated.
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// Where each veth end's receive path (XDP, AF_XDP copy) runs: `sender`
    /// (veth's default: in the softirq of the CPU that sent the frame) or
    /// `receiver` (threaded NAPI pinned to the owner's CPUs, like a NIC
    /// interrupting the server's CPU; for servers with an XDP program).
    #[arg(long, default_value = "sender", value_parser = ["sender", "receiver"])]
    rx_on: String,
    /// Keep the servers' logs in this directory.
    #[arg(long)]
    keep_logs: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Servers, in visiting order.
    #[arg(long, value_delimiter = ',', default_value = "reflector,afxdp,steer,kernel-echo,sockperf,steer-proxy,kernel-proxy", value_parser = parse_kind)]
    servers: Vec<Kind>,
    /// Interleaved runs (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Fixed rates for the cost phases (the first is the latency rate).
    #[arg(long, value_delimiter = ',', default_value = "50k,200k", value_parser = parse_pps)]
    rates: Vec<u64>,
    /// Fixed rates for the proxies (below what one CPU forwards; the first
    /// is their latency rate).
    #[arg(long, value_delimiter = ',', default_value = "10k,20k", value_parser = parse_pps)]
    proxy_rates: Vec<u64>,
    /// CI smoke: 1 run, 1 s windows; fails unless every number is found.
    #[arg(long)]
    quick: bool,
}

#[derive(Debug, Args)]
struct FrontierArgs {
    #[command(flatten)]
    common: Common,
    /// Interleaved runs (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Rates of every point.
    #[arg(long, value_delimiter = ',', default_value = "20k,50k", value_parser = parse_pps)]
    rates: Vec<u64>,
    /// Only the points whose label contains one of these (list; e.g.
    /// `kernel` or `adaptive,sleep`). Default: every point.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

#[derive(Debug, Args)]
struct LoadArgs {
    #[command(flatten)]
    common: Common,
    /// The server.
    #[arg(long, value_parser = parse_kind, default_value = "steer")]
    server: Kind,
    /// Packets per second (`max`: as fast as the generator can).
    #[arg(long, default_value = "max", value_parser = parse_rate)]
    rate: Rate,
}

#[derive(Debug, Subcommand)]
enum SockperfCmd {
    /// Print what one client report says (key=value).
    Parse {
        /// sockperf's output.
        file: PathBuf,
    },
    /// Check the parser on captured outputs and their expectations.
    CheckFixtures {
        /// Directory with sockperf-*.txt/.expected and aggregate-*.expected.
        dir: PathBuf,
    },
    /// The steer-vs-kernel table and JSON from compare-kernel's logs.
    Compare {
        /// Work directory (<side>-<mode>-client<i>.log, ...).
        #[arg(long)]
        work: PathBuf,
        /// Modes run.
        #[arg(long, value_delimiter = ',', default_value = "under-load,ping-pong")]
        modes: Vec<String>,
        /// Clients per mode.
        #[arg(long)]
        clients: usize,
        /// Write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Exit 3 unless steer reaches the goal in every mode.
        #[arg(long)]
        require_goal: bool,
        /// Settings to record (key=value, repeatable).
        #[arg(long = "set", value_parser = parse_kv)]
        settings: Vec<(String, String)>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if std::env::var_os("RUST_LOG").is_none() {
        // libbpf and libxdp warn on every load here (no bpffs, BTF sections
        // they skip); RUST_LOG=debug keeps their messages.
        steer_xdp::object::silence_libxdp();
    }
    let result = match cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Load(a) => cmd_load(a),
        Cmd::Frontier(a) => cmd_frontier(a),
        Cmd::Sockperf(c) => cmd_sockperf(c),
        Cmd::CompareKernel(a) => steer_bench::compare_kernel::run(&a),
        Cmd::Seed(c) => steer_bench::seeds::run(c),
        Cmd::Hostile(a) => run_hostile(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Transparent(a) => run_transparent(&a).map(|()| ExitCode::SUCCESS),
        Cmd::KernelEcho {
            addr,
            cpus,
            busy_poll_us,
        } => steer_bench::kernel_echo::run(addr, &cpus.0, busy_poll_us).map(|_| ExitCode::SUCCESS),
        Cmd::AfxdpEcho {
            interface,
            port,
            cpu,
        } => steer_bench::afxdp_echo::run(&interface, port, cpu).map(|_| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("steer-bench: {e:#}");
            if format!("{e:#}").contains("interrupted") {
                ExitCode::from(130)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Checks what the command line asks for against the machine.
fn config(
    c: &Common,
    servers: Vec<Kind>,
    runs: usize,
    phases: Vec<Option<u64>>,
) -> Result<BenchConfig> {
    if !sys::is_root() {
        bail!("run as root (network namespaces, veth, XDP, AF_XDP, RPS sysctls): sudo steer-bench ...");
    }
    let exe = std::env::current_exe().context("finding this binary")?;
    let dir = exe.parent().context("this binary has no directory")?;
    let steer_bin = dir.join("steer").to_string_lossy().into_owned();
    let steer_cmd: Vec<String> = match &c.steer_cmd {
        Some(s) => s.split_whitespace().map(str::to_owned).collect(),
        None => vec![steer_bin.clone(), "echo".into()],
    };
    let log_dir = match &c.keep_logs {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("steer-bench-{}", std::process::id())),
    };
    let cfg = BenchConfig {
        servers,
        runs: runs.max(1),
        proxy_phases: phases.clone(),
        phases,
        flows: c.flows,
        port: c.port,
        sport_base: c.sport_base,
        gen_cpu: c.gen_cpu,
        server_cpus: c.server_cpus.0.clone(),
        weights: c.weights.clone(),
        queues: c.queues,
        warmup: Duration::from_millis(c.warmup_ms),
        // Out of range (negative, NaN, huge): zero, which check() refuses.
        window: Duration::try_from_secs_f64(c.window_secs).unwrap_or(Duration::ZERO),
        drain: Duration::from_millis(c.drain_ms),
        tick: Duration::from_micros(c.tick_us.max(1)),
        arrivals: Arrivals::parse(&c.arrivals, c.burst).map_err(anyhow::Error::msg)?,
        retries: c.retries,
        steer_cmd,
        steer_bin,
        rx_on_receiver: c.rx_on == "receiver",
        proxy_runtime: c.proxy_runtime.clone(),
        log_dir,
    };
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    cfg.check(ncpu, c.gen_on_server_cpu)?;
    if cfg.servers.contains(&Kind::Steer) {
        let Some(first) = cfg.steer_cmd.first() else {
            bail!("--steer-cmd is empty")
        };
        if steer_bench::procs::find_in_path(first).is_none() {
            bail!("the steer command {first:?} not found: build it (cargo build --release -p flowsteer-cli) or pass --steer-cmd");
        }
    }
    if cfg.servers.iter().any(|k| k.is_proxy())
        && steer_bench::procs::find_in_path(&cfg.steer_bin).is_none()
    {
        bail!(
            "the proxies need {:?}: build it (cargo build --release -p flowsteer-cli)",
            cfg.steer_bin
        );
    }
    std::fs::create_dir_all(&cfg.log_dir)
        .with_context(|| format!("creating {}", cfg.log_dir.display()))?;
    Ok(cfg)
}

/// One measurement at a time (the same lock as `compare-kernel`): runs
/// sharing the CPUs would measure each other, and
/// net.core.rps_sock_flow_entries is global. Held until the file is dropped.
fn measurement_lock(stop: &std::sync::atomic::AtomicBool) -> Result<std::fs::File> {
    steer_bench::seeds::harness::lock(
        Path::new(steer_bench::compare_kernel::LOCK_PATH),
        "steer-bench",
        stop,
        Duration::from_secs(24 * 3600),
    )
}

fn config_json(cfg: &BenchConfig, quick: bool) -> serde_json::Value {
    json!({
        "servers": cfg.servers.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "runs": cfg.runs,
        "phases": cfg.phases.iter().map(|p| steer_bench::report::phase_name(*p)).collect::<Vec<_>>(),
        "proxy_phases": cfg.proxy_phases.iter().map(|p| steer_bench::report::phase_name(*p)).collect::<Vec<_>>(),
        "flows": cfg.flows,
        "port": cfg.port,
        "generator_cpu": cfg.gen_cpu,
        "server_cpus": cfg.server_cpus,
        "weights": cfg.weights,
        "queues": cfg.queues,
        "warmup_secs": cfg.warmup.as_secs_f64(),
        "window_secs": cfg.window.as_secs_f64(),
        "drain_secs": cfg.drain.as_secs_f64(),
        "tick_us": cfg.tick.as_micros() as u64,
        "arrivals": cfg.arrivals.label(),
        "retries": cfg.retries,
        "steer_cmd": cfg.steer_cmd.join(" "),
        "proxy_runtime": cfg.proxy_runtime,
        "rx_on": if cfg.rx_on_receiver { "receiver" } else { "sender" },
        "rps": {"rps_flow_cnt": steer_bench::netns::RPS_FLOW_CNT, "rps_sock_flow_entries": steer_bench::netns::RPS_SOCK_FLOW_ENTRIES},
        "quick": quick,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let mut c = a.common.clone();
    let mut runs = a.runs;
    if a.quick {
        c.warmup_ms = c.warmup_ms.min(300);
        c.window_secs = c.window_secs.min(1.0);
        c.drain_ms = c.drain_ms.min(200);
        runs = 1;
    }
    let with_max = |rates: &[u64]| {
        std::iter::once(None)
            .chain(rates.iter().map(|&r| Some(r)))
            .collect::<Vec<_>>()
    };
    let mut cfg = config(&c, a.servers.clone(), runs, with_max(&a.rates))?;
    cfg.proxy_phases = with_max(&a.proxy_rates);
    let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
    let _lock = measurement_lock(stop)?;
    let before = bench::machine_load();
    println!("steer-bench: machine before the run: {before}");
    let outcome = bench::run(&cfg, stop)?;
    let after = bench::machine_load();
    println!("steer-bench: machine after the run: {after}");
    let rep = Report::of(
        &cfg.servers,
        &outcome.runs,
        &a.rates,
        &a.proxy_rates,
        cfg.runs,
    );
    print!("{}", rep.text());
    let spreads = steer_bench::spread::spreads(&cfg.servers, &outcome.runs, &a.rates);
    if let Some(line) = steer_bench::spread::line(&spreads) {
        println!("{line}");
    }
    println!(
        "where it ran (last run): generator thread pinned to CPU {}{}",
        cfg.gen_cpu,
        outcome
            .generator_rx
            .as_deref()
            .map(|d| format!("; its receive path (NAPI threads): {d}"))
            .unwrap_or_default()
    );
    print!("{}", rep.ran_on());
    if let Some(path) = &c.json {
        let machine = json!({"before": before, "after": after, "bed": outcome.bed});
        let mut j = rep.to_json(config_json(&cfg, a.quick), machine, &outcome.runs);
        j["spread"] = json!(spreads
            .iter()
            .map(|(server, what, s)| json!({"server": server, "number": what, "max_over_min": s, "flagged": *s > steer_bench::spread::LIMIT}))
            .collect::<Vec<_>>());
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("JSON in {}", path.display());
    }
    if c.keep_logs.is_none() {
        let _ = std::fs::remove_dir_all(&cfg.log_dir);
    }
    let missing = rep.missing();
    if !missing.is_empty() {
        eprintln!("steer-bench: numbers not found: {}", missing.join(", "));
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_frontier(a: FrontierArgs) -> Result<ExitCode> {
    use steer_bench::frontier;
    let phases = a.rates.iter().map(|&r| Some(r)).collect();
    let cfg = config(
        &a.common,
        vec![Kind::Steer, Kind::KernelEcho],
        a.runs,
        phases,
    )?;
    let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
    let _lock = measurement_lock(stop)?;
    let before = bench::machine_load();
    println!("steer-bench frontier: machine before: {before}");
    let points = frontier::select(frontier::points(), &a.only);
    if points.is_empty() {
        bail!("--only {:?} matches no point", a.only.join(","));
    }
    let measured = frontier::run(&cfg, &a.rates, &points, stop)?;
    let after = bench::machine_load();
    println!("steer-bench frontier: machine after: {after}");
    let sums = frontier::summarize(&measured, &a.rates, &points);
    print!("{}", frontier::table(&sums));
    if let Some(path) = &a.common.json {
        let mut config = config_json(&cfg, false);
        config["machine"] = json!({"before": before, "after": after});
        let j = frontier::json(config, &sums, &measured);
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "JSON in {} (steer plot {} draws it)",
            path.display(),
            path.display()
        );
    }
    if a.common.keep_logs.is_none() {
        let _ = std::fs::remove_dir_all(&cfg.log_dir);
    }
    Ok(if sums.iter().all(|s| s.held() && s.p99_us.is_some()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn cmd_load(a: LoadArgs) -> Result<ExitCode> {
    let cfg = config(&a.common, vec![a.server], 1, vec![a.rate.pps()])?;
    let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
    let _lock = measurement_lock(stop)?;
    println!(
        "steer-bench: machine before the run: {}",
        bench::machine_load()
    );
    let outcome = bench::run(&cfg, stop)?;
    let Some(sr) = outcome.runs.first() else {
        bail!("no result")
    };
    if let Some(e) = &sr.error {
        bail!("{}: {e}", a.server.name());
    }
    for (_, p) in &sr.phases {
        print!("{}", report::per_flow_table(&p.per_flow, &p.total));
    }
    for (name, p) in &sr.phases {
        println!(
            "phase {name}: offered {:.0}/s, answered {:.0}/s, latency p50 {} p99 {} us, lost {}, reordered {}",
            p.offered_pps,
            p.answered_pps,
            p.latency.map_or("-".into(), |l| format!("{:.1}", l.p50_us)),
            p.latency.map_or("-".into(), |l| format!("{:.1}", l.p99_us)),
            p.total.lost,
            p.total.reordered,
        );
    }
    if let Some(line) = sr.stats.as_ref().and_then(report::steer_load_line) {
        println!("{line}");
    }
    println!("{} ran on: {}", a.server.name(), sr.ran_on);
    if let Some(path) = &a.common.json {
        let j = json!({"tool": "steer-bench load", "config": config_json(&cfg, false), "run": sr});
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let bad = sr.phases.iter().any(|(_, p)| p.answered_pps == 0.0);
    Ok(if bad {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn cmd_sockperf(c: SockperfCmd) -> Result<ExitCode> {
    match c {
        SockperfCmd::Parse { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let r = sockperf::parse(&text);
            print!("{}", r.to_kv());
            Ok(if r.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        SockperfCmd::CheckFixtures { dir } => {
            let (checks, fails) = sockperf::check_fixtures(&dir)?;
            for f in &fails {
                println!("FAIL {f}");
            }
            if fails.is_empty() {
                println!("self-test: all {checks} checks passed");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("self-test: {} of {checks} checks FAILED", fails.len());
                Ok(ExitCode::from(1))
            }
        }
        SockperfCmd::Compare {
            work,
            modes,
            clients,
            json,
            require_goal,
            settings,
        } => {
            let modes = modes
                .iter()
                .map(|m| {
                    sockperf::Mode::parse(m)
                        .with_context(|| format!("unknown mode {m:?}: under-load or ping-pong"))
                })
                .collect::<Result<Vec<_>>>()?;
            let cmp = sockperf::Comparison {
                work,
                modes,
                clients,
                config: settings,
            };
            let (table, j, status) = sockperf::compare(&cmp, require_goal);
            print!("{table}");
            println!();
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&j)? + "\n")
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("compare-kernel: JSON summary in {}", path.display());
            }
            Ok(ExitCode::from(status as u8))
        }
    }
}
