//! `steer echo`: the L4 UDP echo server on steer. AF_XDP receive,
//! RPS/RFS-style steering to pinned workers, the reply rewritten in place and
//! sent from the worker that handled the packet. `--sockperf` answers like
//! `sockperf server`, so sockperf clients can drive it unchanged.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use steer_engine::echo::{echo_in_place, EchoMode, NoReply};
use steer_engine::engine::{PacketContext, Verdict};
use steer_xdp::Proto;

use crate::args::EngineArgs;

/// `steer echo` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer echo -i eth1 -p 11111                      answer UDP port 11111 on every CPU\n  \
    steer echo -i eth1 -p 11111 --cpus 1 --sockperf  one worker on CPU 1, answer sockperf clients\n  \
    steer echo -i eth1 -p 7 --policy always --stats-json /tmp/echo.json\n  \
    steer echo -i eth1 -p 7 --metrics 127.0.0.1:9464    Prometheus metrics on /metrics\n  \
    steer echo -i eth1 -p 7 --user nobody             run as nobody once set up (seccomp on by default)\n  \
    steer echo -i eth1 -p 7 --cost-ns 2000 --balance on   a costly handler, the load balancer on")]
pub struct EchoArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// UDP port(s) to answer on (repeatable); other traffic goes to the kernel.
    #[arg(long, short = 'p', required = true, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Vec<u16>,
    /// Answer like `sockperf server` (pong requests only, client flag cleared).
    #[arg(long)]
    pub sockperf: bool,
    /// `--stats-json` (with the frame accounting), `--duration`, `--no-table`.
    #[command(flatten)]
    pub run: crate::args::RunArgs,
    /// Spin this many nanoseconds of CPU per packet before answering (a
    /// handler with a cost, to load the workers; default 0).
    #[arg(long, default_value_t = 0)]
    pub cost_ns: u64,
}

pub fn run(args: &EchoArgs) -> anyhow::Result<ExitCode> {
    let stop = steer_xdp::shutdown::install()?;
    let mode = if args.sockperf {
        EchoMode::Sockperf
    } else {
        EchoMode::Plain
    };
    let cost = Duration::from_nanos(args.cost_ns);
    let mut builder = args.engine.builder()?.handler(move |_cpu| {
        Box::new(move |packet: &mut [u8], _ctx: &PacketContext| {
            spin(cost);
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
    let engine = builder.start()?;
    // Set up: from here every thread runs under the allowlist.
    args.engine.privileges.apply_seccomp()?;
    let modes = engine.modes();
    let on_off = |on: bool| if on { "on" } else { "off" };
    println!(
        "steer echo: ready on {} udp port(s) {:?}, xdp {:?}, bind {:?}, policy {}, fast path {}, balancer {}",
        args.engine.interface,
        args.port,
        modes.xdp,
        modes.bind,
        args.engine.policy,
        on_off(args.engine.fast_path.is_on()),
        on_off(args.engine.balance.is_on()),
    );
    crate::args::print_endpoints("echo", &engine, &args.engine.interface);

    let started = Instant::now();
    let deadline = args.run.deadline(started);
    let mut previous = engine.stats();
    let mut next_table = started + Duration::from_secs(1);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if let Err(e) = crate::args::check_workers(&engine, &args.engine) {
            engine.stop()?;
            return Err(e);
        }
        if now >= next_table {
            next_table += Duration::from_secs(1);
            let stats = engine.stats();
            if !args.run.no_table {
                println!("{}\n", stats.table(Some(&previous)));
            }
            previous = stats;
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let report = engine.stop()?;
    let t = &report.stats.total;
    println!(
        "steer echo: stopped after {:.1} s: rx {} tx {} fast path {} steered {} drops {} (ring {}, tx {}, malformed {}, refused {}, worker gone {}, handler panicked {}), steering updates {}, kernel rx drops {}",
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
        t.core.worker_gone_drops,
        t.engine.app_panicked,
        report.stats.steering_updates(),
        report.kernel.rx_dropped + report.kernel.rx_ring_full,
    );
    if report.stats.balance.on || report.stats.balance.moves() > 0 {
        let b = &report.stats.balance;
        println!(
            "steer echo: balancer moves {} (same LLC {}, cross LLC {}), elephants {}, worker busy max/mean {:.2}",
            b.moves(),
            b.moves_same_llc,
            b.moves_cross_llc,
            b.elephants,
            report.stats.load_max_over_mean(None),
        );
    }
    crate::args::print_trace("echo", &report);
    let balanced = report.census_ok();
    println!(
        "steer echo: frames {} of {} back, accounting {}",
        report.census.free + report.census.fill_ring + report.census.kernel_rx,
        report.census.total,
        if balanced { "balanced" } else { "NOT balanced" }
    );
    if let Some(path) = &args.run.stats_json {
        let json = serde_json::to_string_pretty(&report.to_json_value())?;
        std::fs::write(path, json + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(if balanced {
        ExitCode::SUCCESS
    } else {
        eprintln!("steer echo: frame accounting: {:?}", report.census.check());
        ExitCode::from(2)
    })
}

/// Spends `cost` of CPU time (a busy wait; nothing when zero).
fn spin(cost: Duration) {
    if cost.is_zero() {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < cost {
        std::hint::spin_loop();
    }
}
