//! `steer rfs`: LLC-aware RFS for applications that never heard of steer.
//! It attaches the XDP RFS program to an interface and the in-kernel
//! recorder (a BPF program on the `sock_recv_length` tracepoint): whenever
//! any process reads a connected TCP socket of one of the given ports, the
//! reading CPU becomes the flow's desired CPU under the LLC rule (or
//! always), and the flow's segments are handed to that CPU's stack through
//! a cpumap, in order. For UDP ports (`-u`), cgroup recvmsg hooks do the
//! same per sender for every datagram a process of the cgroup (`--cgroup`,
//! default all) reads with its sender's address (dnsmasq, unbound). Nothing runs in the applications; this process only
//! holds the programs, prints the counters once a second and, at
//! SIGINT/SIGTERM (or `--duration`), detaches them and prints a summary
//! (also as JSON). A `kill -9` leaves the programs attached until the next
//! start, which replaces them (the interface's owner lock tells a dead run
//! from a live one).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use steer_kernel::{Proto, RfsStats};

use crate::kernel_args::{delta, KernelSteeringArgs};

/// `steer rfs` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer rfs -i eth1 -p 5201                        iperf3's connections steered to their reader's CPU\n  \
    steer rfs -i eth1 -p 80 -p 443 --policy always   every change of reading CPU is written\n  \
    steer rfs -i eth1 -u 53                          dnsmasq's clients steered to its CPU\n  \
    steer rfs -i eth1 -p 443 --metrics 9465          Prometheus metrics on /metrics\n  \
    steer rfs -i eth1 -p 5201 --topology 'pack:1 l3:2 core:1 pu:1'   a 2-LLC model on a 1-LLC machine")]
pub struct RfsArgs {
    /// The interface the connections arrive on.
    #[arg(long, short = 'i')]
    pub interface: String,
    /// A TCP port whose connections are steered (repeat for more).
    #[arg(long = "port", short = 'p', required_unless_present = "udp_ports",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub ports: Vec<u16>,
    /// A UDP port whose datagrams are steered to the CPU reading each
    /// sender's (repeat for more).
    #[arg(long = "udp-port", short = 'u',
          value_parser = clap::value_parser!(u16).range(1..))]
    pub udp_ports: Vec<u16>,
    /// The cgroup (v2 directory) whose processes' UDP reads are recorded,
    /// descendants included (default: the cgroup v2 root, every process).
    #[arg(long)]
    pub cgroup: Option<std::path::PathBuf>,
    /// Serve the program's counters as Prometheus metrics (read-only) on
    /// http://ADDR/metrics: a port alone binds loopback (`9465` is
    /// `127.0.0.1:9465`); port 0 picks a free one, printed at start. Bound
    /// once set up: a port below 1024 needs --keep-capabilities.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = crate::args::metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// The steering's flags (reads on CPUs outside `--cpus` are not
    /// recorded).
    #[command(flatten)]
    pub steering: KernelSteeringArgs,
}

/// One live row: what changed in the last `secs`.
fn row(now: &RfsStats, before: &RfsStats, landed: &[u64], secs: f64) -> String {
    let updates = now.recorder_updates - before.recorder_updates;
    format!(
        "reads {} | new flows {} | updates {} ({:.0}/s) suppressed {} | redirected {} held back {} | landed per CPU {landed:?}",
        now.recorded - before.recorded,
        now.recorder_new_flows - before.recorder_new_flows,
        updates,
        updates as f64 / secs.max(1e-9),
        now.recorder_suppressed - before.recorder_suppressed,
        now.redirected - before.redirected,
        now.held_back - before.held_back,
    )
}

fn summary(args: &RfsArgs, elapsed: f64, s: &RfsStats, landed: &[u64]) -> serde_json::Value {
    json!({
        "interface": args.interface,
        "ports": args.ports,
        "udp_ports": args.udp_ports,
        "policy": args.steering.policy.name(),
        "topology": args.steering.topology_name(),
        "elapsed_s": elapsed,
        "recorder": {
            "reads": s.recorded,
            "new_flows": s.recorder_new_flows,
            "updates": s.recorder_updates,
            "updates_per_s": s.recorder_updates as f64 / elapsed.max(1e-9),
            "suppressed": s.recorder_suppressed,
        },
        "program": {
            "redirected": s.redirected,
            "moves": s.moves,
            "held_back": s.held_back,
            "forced": s.forced,
            "delivered": s.delivered,
            "untracked": s.untracked,
            "queue_drops": s.queue_drops,
            "redirect_errors": s.redirect_errors,
            "csum_completed": s.csum_completed,
        },
        "landed_per_cpu": landed,
    })
}

pub fn run(args: &RfsArgs) -> anyhow::Result<ExitCode> {
    let stop = steer_xdp::shutdown::install()?;
    let (_owner, shared) = steer_xdp::owner_lock::InterfaceLock::acquire_noting(&args.interface)?;
    // Taken fresh, the lock says no steer process serves the interface:
    // what a dead run left is replaced.
    let mut b = args
        .steering
        .builder(&args.interface, !shared)?
        .record_in_kernel(true);
    for &port in &args.ports {
        b = b.own(Proto::Tcp, port);
    }
    for &port in &args.udp_ports {
        b = b.own(Proto::Udp, port);
    }
    if let Some(cgroup) = &args.cgroup {
        b = b.cgroup(cgroup);
    }
    let steering = b.start()?;
    let program = steering
        .program()
        .context("the RFS program is not attached")?;
    let exporter = match args.metrics {
        Some(addr) => {
            let weak = steering
                .program_weak()
                .context("the RFS program is not attached")?;
            let exporter = steer_engine::observe::exporter::Exporter::start(addr, move || {
                crate::rfs_metrics::scrape(&weak)
            })
            .with_context(|| format!("serving metrics on {addr}"))?;
            Some(exporter)
        }
        None => None,
    };
    // Set up: from here every thread runs under the allowlist.
    args.steering.privileges.apply_seccomp()?;
    println!(
        "steer rfs: ready on {}: recording tcp ports {:?}, udp ports {:?}, policy {}, xdp {:?}, CPUs {}",
        args.interface,
        args.ports,
        args.udp_ports,
        args.steering.policy,
        program.mode(),
        steering.cpus(),
    );
    if let Some(e) = &exporter {
        println!("steer rfs: metrics on http://{}/metrics", e.addr());
    }
    let landed = || program.landed_per_cpu().unwrap_or_default();
    let stats = || program.stats().unwrap_or_default();
    let started = Instant::now();
    let landed_start = landed();
    let mut previous = (stats(), landed_start.clone());
    args.steering.run_live(stop, started, || {
        let current = (stats(), landed());
        if !args.steering.run.no_table {
            println!(
                "{}",
                row(
                    &current.0,
                    &previous.0,
                    &delta(&current.1, &previous.1),
                    1.0
                )
            );
        }
        previous = current;
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (total, landed_total) = (stats(), delta(&landed(), &landed_start));
    drop(exporter);
    steering.stop();
    println!(
        "steer rfs: stopped after {elapsed:.1} s: {} reads recorded, {} new flows, {} updates ({:.0}/s), {} suppressed by the LLC rule, {} segments redirected, landed per CPU {landed_total:?}",
        total.recorded,
        total.recorder_new_flows,
        total.recorder_updates,
        total.recorder_updates as f64 / elapsed.max(1e-9),
        total.recorder_suppressed,
        total.redirected,
    );
    if let Some(path) = &args.steering.run.stats_json {
        let report = summary(args, elapsed, &total, &landed_total);
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
