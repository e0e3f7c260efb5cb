//! The L4 UDP echo server on steer: AF_XDP receive, RPS/RFS-style steering
//! to pinned workers, the reply rewritten in place and sent from the worker
//! that handled the packet. `--sockperf` answers like `sockperf server`, so
//! sockperf clients can drive it unchanged.
//!
//! ```text
//! echo_server --interface veth0 --port 11111 --sockperf --stats-json /tmp/echo.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use steer::core::cpu::CpuSet;
use steer::core::policy::Policy;
use steer::echo::{echo_in_place, EchoMode, NoReply};
use steer::engine::{Engine, PacketContext, RpsMode, Verdict};
use steer::xdp::{BindMode, Proto, XdpMode};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Rps {
    /// Local with an rx queue per CPU, spread otherwise.
    Auto,
    /// Flows stay on their rx queue's CPU unless learned or pinned elsewhere.
    Local,
    /// Flows are spread over the worker CPUs by hash.
    Spread,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AttachMode {
    Auto,
    Native,
    Generic,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Bind {
    Auto,
    Copy,
    Zerocopy,
}

/// UDP echo over AF_XDP with steer's flow steering.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The interface to serve on.
    #[arg(long, short = 'i')]
    interface: String,
    /// UDP port(s) to answer on (repeatable); other traffic goes to the kernel.
    #[arg(long, short = 'p', required = true)]
    port: Vec<u16>,
    /// Worker CPUs, kernel list format (default: all online CPUs).
    #[arg(long)]
    cpus: Option<CpuSet>,
    /// Rx queues to open, e.g. `0,1` (default: all).
    #[arg(long, value_delimiter = ',')]
    queues: Option<Vec<u32>>,
    /// Desired-table update policy.
    #[arg(long, default_value = "llc")]
    policy: Policy,
    /// The same-CPU fast path.
    #[arg(long, value_enum, default_value = "on")]
    fast_path: OnOff,
    /// Where flows go before anything is learned (RPS).
    #[arg(long, value_enum, default_value = "auto")]
    rps: Rps,
    /// Busy-poll instead of sleeping when idle.
    #[arg(long)]
    busy_poll: bool,
    /// Empty rounds a worker spins before sleeping.
    #[arg(long, default_value_t = 64)]
    idle_spins: u32,
    /// Answer like `sockperf server` (pong requests only, client flag cleared).
    #[arg(long)]
    sockperf: bool,
    /// Write the final counters and the frame accounting here on exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Do not print the live table.
    #[arg(long)]
    no_table: bool,
    /// Slots of each dispatcher-to-worker ring.
    #[arg(long, default_value_t = 1024)]
    ring_size: usize,
    /// UMEM frames.
    #[arg(long, default_value_t = 8192)]
    frames: u32,
    /// AF_XDP ring size.
    #[arg(long, default_value_t = 2048)]
    xsk_ring_size: u32,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    xdp_mode: AttachMode,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    bind: Bind,
    /// Use this hwloc synthetic topology for the LLC rule instead of the
    /// machine's (e.g. `pack:2 l3:1 core:1 pu:1`: two CPUs in two LLCs).
    #[arg(long)]
    topology: Option<String>,
    /// Leave the workers unpinned.
    #[arg(long)]
    no_pin: bool,
    /// Entries of the desired-CPU table (a power of two).
    #[arg(long, default_value_t = 65536)]
    flow_table: usize,
    /// Scheduling slice the workers ask for, in microseconds (Linux >= 6.12;
    /// the kernel grants 100 or more); 0 keeps the kernel's default.
    #[arg(long, default_value_t = 100)]
    worker_slice_us: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("echo_server: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let stop = steer::xdp::shutdown::install()?;
    let mode = if args.sockperf {
        EchoMode::Sockperf
    } else {
        EchoMode::Plain
    };
    let mut builder = Engine::builder(&args.interface)
        .policy(args.policy)
        .fast_path(matches!(args.fast_path, OnOff::On))
        .busy_poll(args.busy_poll)
        .idle_spins(args.idle_spins)
        .flow_tables(args.flow_table, 4096)
        .worker_slice(
            (args.worker_slice_us > 0).then(|| Duration::from_micros(args.worker_slice_us)),
        )
        .ring_capacity(args.ring_size)
        .frames(args.frames, args.xsk_ring_size)
        .xdp_mode(match args.xdp_mode {
            AttachMode::Auto => XdpMode::Auto,
            AttachMode::Native => XdpMode::Native,
            AttachMode::Generic => XdpMode::Generic,
        })
        .bind_mode(match args.bind {
            Bind::Auto => BindMode::Auto,
            Bind::Copy => BindMode::Copy,
            Bind::Zerocopy => BindMode::ZeroCopy,
        })
        .handler(move |_cpu| {
            Box::new(move |packet: &mut [u8], _ctx: &PacketContext| {
                match echo_in_place(packet, mode) {
                    Ok(len) => Verdict::Transmit(len),
                    Err(NoReply::NotRequested) => Verdict::Consume,
                    Err(_) => Verdict::Drop,
                }
            })
        });
    for &p in &args.port {
        builder = builder.own(Proto::Udp, p);
    }
    if let Some(cpus) = &args.cpus {
        builder = builder.cpus(*cpus);
    }
    if let Some(q) = &args.queues {
        builder = builder.queues(q.iter().copied());
    }
    if let Some(spec) = &args.topology {
        builder = builder.topology(steer::topology::Topology::synthetic(spec)?);
    }
    builder = builder.pin_workers(!args.no_pin);
    match args.rps {
        Rps::Auto => {}
        Rps::Local => builder = builder.rps(RpsMode::Local),
        Rps::Spread => builder = builder.rps(RpsMode::Spread),
    }
    let engine = builder.start()?;
    let modes = engine.modes();
    println!(
        "steer echo: ready on {} udp port(s) {:?}, xdp {:?}, bind {:?}, policy {}, fast path {}",
        args.interface,
        args.port,
        modes.xdp,
        modes.bind,
        args.policy,
        if matches!(args.fast_path, OnOff::On) {
            "on"
        } else {
            "off"
        },
    );

    let started = Instant::now();
    let deadline = args
        .duration
        .map(|s| started + Duration::from_secs_f64(s.max(0.0)));
    let mut previous = engine.stats();
    let mut next_table = started + Duration::from_secs(1);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if now >= next_table {
            next_table += Duration::from_secs(1);
            let stats = engine.stats();
            if !args.no_table {
                println!("{}\n", stats.table(Some(&previous)));
            }
            previous = stats;
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let report = engine.stop()?;
    let t = &report.stats.total;
    println!(
        "steer echo: stopped after {:.1} s: rx {} tx {} fast path {} steered {} drops {} (ring {}, tx {}, malformed {}, refused {}), steering updates {}, kernel rx drops {}",
        report.stats.elapsed.as_secs_f64(),
        t.core.rx,
        t.engine.tx,
        t.core.fast_path,
        t.core.steered_out,
        t.drops(),
        t.core.dropped,
        t.engine.tx_dropped,
        t.core.malformed,
        t.engine.app_dropped,
        report.stats.steering_updates(),
        report.kernel.rx_dropped + report.kernel.rx_ring_full,
    );
    let balanced = report.census_ok();
    println!(
        "steer echo: frames {} of {} back, accounting {}",
        report.census.free + report.census.fill_ring + report.census.kernel_rx,
        report.census.total,
        if balanced { "balanced" } else { "NOT balanced" }
    );
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(&report.to_json_value())?;
        std::fs::write(path, json + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(if balanced {
        ExitCode::SUCCESS
    } else {
        eprintln!("echo_server: frame accounting: {:?}", report.census.check());
        ExitCode::from(2)
    })
}
