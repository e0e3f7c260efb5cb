//! `steer rfs`: LLC-aware RFS for applications that never heard of steer.
//! It attaches the XDP RFS program to an interface and the in-kernel
//! recorder (a BPF program on the `sock_recv_length` tracepoint): whenever
//! any process reads a connected TCP socket of one of the given ports, the
//! reading CPU becomes the flow's desired CPU under the LLC rule (or
//! always), and the flow's segments are handed to that CPU's stack through
//! a cpumap, in order. For UDP ports (`-u`), cgroup recvmsg hooks do the
//! same per sender for every datagram a process of the cgroup (`--cgroup`,
//! default all) reads with its sender's address (dnsmasq, unbound), and
//! with `--connected-udp` the tracepoint for every read of a connected UDP
//! socket of those ports (a server with a socket per peer; with a TCP port
//! it is attached anyway). Nothing runs in the applications;
//! this process only
//! holds the programs, prints the counters once a second and, at
//! SIGINT/SIGTERM (or `--duration`), detaches them and prints a summary
//! (also as JSON). While it runs, its stats socket
//! (`/run/steer/<interface>.sock`, as an engine's: `0600`, or `0660` with
//! `--stats-group`; removed at stop, a stale one replaced) answers `steer
//! stats` and `steer top` with an `rfs` snapshot (`rfs_live`), and
//! `--metrics` serves the counters to Prometheus (`rfs_metrics`), both
//! from one observer thread. A `kill -9` leaves the programs attached
//! until the next start, which replaces them (the interface's owner lock
//! tells a dead run from a live one).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use steer_engine::observe::exporter::Exporter;
use steer_engine::observe::{StatsAccess, StatsEndpoint};
use steer_kernel::{Proto, RfsStats};

use crate::kernel_args::{delta, KernelSteeringArgs};
use crate::rfs_live::RfsIdentity;

/// `steer rfs` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer rfs -i eth1 -p 5201                        iperf3's connections steered to their reader's CPU\n  \
    steer rfs -i eth1 -p 80 -p 443 --policy always   every change of reading CPU is written\n  \
    steer rfs -i eth1 -u 53                          dnsmasq's clients steered to its CPU\n  \
    steer rfs -i eth1 -p 443 --metrics 9465          Prometheus metrics on /metrics\n  \
    steer rfs -i eth1 -p 443 --stats-group adm       `steer top eth1` for the adm group too\n  \
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
    /// Record the reads of connected UDP sockets of the UDP ports too (a
    /// server with a socket per peer that reads with `recv`): attaches the
    /// tracepoint, which runs on every read of every socket on the host
    /// (about 140 ns a read), for UDP-only steering too. With a TCP port
    /// it is attached anyway, and connected UDP sockets are recorded.
    #[arg(long)]
    pub connected_udp: bool,
    /// Serve the program's counters as Prometheus metrics (read-only) on
    /// http://ADDR/metrics: a port alone binds loopback (`9465` is
    /// `127.0.0.1:9465`); port 0 picks a free one, printed at start. Bound
    /// once set up: a port below 1024 needs --keep-capabilities.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = crate::args::metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Directory of the stats socket `steer stats` and `steer top` read
    /// (`<DIR>/<interface>.sock`, as an engine's).
    #[arg(long, value_name = "DIR", default_value = steer_engine::observe::DEFAULT_RUN_DIR)]
    pub run_dir: std::path::PathBuf,
    /// Let the members of group NAME read the stats socket (mode 0660 with
    /// that group) besides root (0600 otherwise).
    #[arg(long, value_name = "NAME")]
    pub stats_group: Option<String>,
    /// Serve no stats socket (`steer stats` and `steer top` cannot read
    /// this process).
    #[arg(long)]
    pub no_stats_socket: bool,
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

/// Claims the stats socket (`--run-dir`, `--stats-group`), unless
/// `--no-stats-socket`: refused while another process answers there.
fn claim_stats_socket(args: &RfsArgs) -> anyhow::Result<Option<StatsEndpoint>> {
    if args.no_stats_socket {
        return Ok(None);
    }
    let access = match &args.stats_group {
        Some(name) => StatsAccess::group(name)?,
        None => StatsAccess::Owner,
    };
    Ok(Some(StatsEndpoint::claim_for(
        &args.run_dir,
        &args.interface,
        access,
    )?))
}

pub fn run(args: &RfsArgs) -> anyhow::Result<ExitCode> {
    let stop = steer_xdp::shutdown::install()?;
    let (_owner, shared) = steer_xdp::owner_lock::InterfaceLock::acquire_noting(&args.interface)?;
    let endpoint = claim_stats_socket(args)?;
    let stale_socket = endpoint.as_ref().is_some_and(StatsEndpoint::replaced_stale);
    if let (Some(endpoint), Some(user)) = (&endpoint, args.steering.privileges.run_as()?) {
        // Its user removes it at stop.
        endpoint.hand_to(user.uid, user.gid)?;
    }
    // Taken fresh, the lock says no steer process serves the interface, as
    // does a socket nobody answers on: what a dead run left is replaced.
    let mut b = args
        .steering
        .builder(&args.interface, !shared || stale_socket)?
        .record_in_kernel(true)
        .record_connected_udp(args.connected_udp);
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
    let weak = steering
        .program_weak()
        .context("the RFS program is not attached")?;
    let mut observe = Exporter::builder(crate::rfs_live::KIND);
    if let Some(endpoint) = endpoint {
        let identity = RfsIdentity {
            interface: args.interface.clone(),
            tcp_ports: args.ports.clone(),
            udp_ports: args.udp_ports.clone(),
            policy: args.steering.policy.name().into(),
            topology: args.steering.topology_name(),
            xdp_mode: format!("{:?}", program.mode()),
            cpus: steering.cpus(),
            started: Instant::now(),
        };
        let weak = weak.clone();
        observe = observe.stats(endpoint, move || {
            let live = identity.snapshot(&weak)?;
            serde_json::to_value(live).map_err(|e| e.to_string())
        });
    }
    if let Some(addr) = args.metrics {
        observe = observe.metrics(addr, move || crate::rfs_metrics::scrape(&weak));
    }
    let exporter = observe.start().with_context(|| match args.metrics {
        Some(addr) => format!("serving metrics on {addr}"),
        None => "serving the stats socket".into(),
    })?;
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
    if let Some(addr) = exporter.addr() {
        println!("steer rfs: metrics on http://{addr}/metrics");
    }
    if let Some(path) = exporter.stats_path() {
        tracing::info!(socket = %path.display(), "stats socket: `steer stats` and `steer top` read it");
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
    // The stats socket goes first: nobody reads a program being detached.
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
